// Inside the gRPC control plane (grpc_control_plane.cc, grpc_control_plane_join.cc,
// grpc_control_plane_streams.cc): the ControlPlane that speaks to the coordinator.
#ifndef GRADEX_MEMBER_GRPC_CONTROL_PLANE_IMPL_H_
#define GRADEX_MEMBER_GRPC_CONTROL_PLANE_IMPL_H_

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gradex/v1/coordinator.grpc.pb.h"
#include "member/backoff.h"
#include "member/grpc_control_plane.h"
#include "member/plan_store.h"
#include "member/report_queue.h"

namespace gradex::member {

class GrpcControlPlane final : public ControlPlane {
 public:
  GrpcControlPlane(const GrpcControlPlaneOptions& options, std::shared_ptr<grpc::Channel> channel)
      : options_(options),
        channel_(channel),
        stub_(gradex::v1::Coordinator::NewStub(std::move(channel))),
        reports_(options.report_capacity) {}
  ~GrpcControlPlane() override { Stop(); }

  absl::StatusOr<JoinReply> Join(const JoinRequest& request, transport::Deadline deadline) override;
  absl::Status Heartbeat(transport::Deadline deadline) override;
  absl::Status Leave(transport::Deadline deadline) override;

  std::optional<JobPlanConfig> JoinedPlanConfig() const override {
    absl::MutexLock lock(&mu_);
    return plan_config_;
  }
  std::shared_ptr<const Plan> LatestPlan() const override { return store_.Latest(); }
  std::shared_ptr<const Plan> PlanVersion(uint64_t v) const override { return store_.Version(v); }
  bool ReportStep(StepReport report) override {
    next_step_.store(std::max(next_step_.load(), report.step + 1));
    return reports_.Push(std::move(report));
  }
  uint64_t report_drops() const override { return reports_.drops() + lost_.load(); }
  void SetWaitSource(std::shared_ptr<const WaitSource> source) override {
    std::atomic_store(&waits_, std::move(source));
  }

 private:
  void Prepare(grpc::ClientContext& ctx, transport::Deadline deadline);

  // This membership's secret (JoinResponse.member_secret), sent with every
  // call for it.
  std::string Secret();

  absl::StatusOr<JoinReply> DoJoin(transport::Deadline deadline);

  // The first join retries what a coordinator coming up would fix (an agent
  // may start before it, e.g. when a scheduler starts every pod at once) until
  // options_.join_timeout (or `deadline` when 0); each attempt is bounded like
  // `deadline`. A refusal (bad token, bad request, job full) is final at once.
  absl::StatusOr<JoinReply> FirstJoin(transport::Deadline deadline);

  // Re-join after NOT_FOUND or a broken connection; `seen` is the member id
  // the failure was seen with. One thread at a time, and not at all when the
  // other one has re-joined since (a second re-join would replace the first).
  void Recover(Backoff& backoff, uint64_t seen);

  // Waits until `until`, or on Stop, or as soon as the channel turns READY when
  // it was not (the coordinator is back: retry now, not at the end of the
  // backoff). Waiting on the channel also matters in itself: with the sync
  // API only a thread inside a call polls the channel's sockets, and while
  // the coordinator is down every call fails at once, so a reconnect that
  // gRPC started after its own backoff would otherwise complete only at its
  // backup poll (every 5 s) -- that, plus this agent's own growing backoff,
  // was the ~4-10 s re-registration after a coordinator restart.
  void AwaitChannel(transport::Deadline until);

  void Watch();

  void Send();

  // Reports go out on one ReportSteps stream held open for
  // report_stream_window, one Write each: a call per batch cost ~0.3-0.6 ms
  // of CPU on each side (bench/coordinator_overhead), a Write a few us. The
  // coordinator applies each report as it reads it.
  void SendReports(const std::vector<StepReport>& batch);

  // Ends the stream. When the coordinator did not confirm it (no ack), every
  // report written on it counts as lost (an upper bound: it applies each
  // report as it reads it, so most may have landed).
  void CloseReportStream();

  void Stop();

  const GrpcControlPlaneOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<gradex::v1::Coordinator::Stub> stub_;
  PlanStore store_;
  ReportQueue reports_;
  std::atomic<uint64_t> member_id_{0};
  std::atomic<uint64_t> incarnation_{0};
  std::atomic<uint64_t> next_step_{0};
  std::atomic<uint64_t> lost_{0};            // reports a failed send lost
  std::shared_ptr<const WaitSource> waits_;  // std::atomic_load/store only
  std::atomic<std::chrono::milliseconds> heartbeat_{std::chrono::milliseconds(1000)};
  std::atomic<bool> started_{false};
  absl::Mutex recover_mu_;  // held across a re-join and its backoff
  mutable absl::Mutex mu_;
  JoinRequest join_ ABSL_GUARDED_BY(mu_);
  std::string secret_ ABSL_GUARDED_BY(mu_);
  std::optional<JobPlanConfig> plan_config_ ABSL_GUARDED_BY(mu_);
  uint64_t version_offset_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t known_version_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* watch_ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
  // The open report stream; the sender thread's alone.
  std::unique_ptr<grpc::ClientContext> report_ctx_;
  gradex::v1::ReportAck report_ack_;
  std::unique_ptr<grpc::ClientWriter<gradex::v1::StepReport>> report_writer_;
  transport::Clock::time_point report_renew_at_{};
  uint64_t report_written_ = 0;
  std::thread watcher_, sender_;
};

}  // namespace gradex::member

#endif  // GRADEX_MEMBER_GRPC_CONTROL_PLANE_IMPL_H_
