// The gRPC control plane's background threads: the watcher on the plan
// stream, and the sender of heartbeats and of step reports on one held-open stream.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gradex/v1/coordinator.grpc.pb.h"
#include "member/backoff.h"
#include "member/grpc_control_plane_impl.h"
#include "member/grpc_messages.h"

namespace gradex::member {
namespace {

namespace pb = ::gradex::v1;

}  // namespace

void GrpcControlPlane::Watch() {
  Backoff backoff;
  for (;;) {
    pb::WatchPlanRequest req;
    auto ctx = std::make_unique<grpc::ClientContext>();
    Prepare(*ctx, transport::DeadlineIn(options_.watch_window));
    uint64_t offset;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      req.set_known_version(known_version_);
      offset = version_offset_;
      watch_ctx_ = ctx.get();
    }
    const uint64_t member = member_id_.load();
    req.set_member_id(member);
    req.set_member_secret(Secret());
    std::unique_ptr<grpc::ClientReader<pb::Plan>> reader = stub_->WatchPlan(ctx.get(), req);
    pb::Plan m;
    while (reader->Read(&m)) {
      backoff.Reset();
      absl::StatusOr<Plan> p = ToPlan(m, offset);
      if (p.ok()) store_.Publish(*std::move(p)).IgnoreError();
      absl::MutexLock lock(&mu_);
      known_version_ = std::max(known_version_, m.version());
    }
    const grpc::Status st = reader->Finish();
    {
      absl::MutexLock lock(&mu_);
      watch_ctx_ = nullptr;
      if (stopping_) return;
    }
    if (st.ok() || st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) continue;
    // Only a coordinator that does not know this member is re-joined. A
    // broken connection is waited out and the stream re-opened with the
    // same member id: re-joining on it would replace a membership the
    // coordinator still holds and open a needless epoch on a network blip.
    // A restarted coordinator answers the re-opened stream NOT_FOUND.
    if (st.error_code() == grpc::StatusCode::NOT_FOUND) {
      Recover(backoff, member);
    } else {
      AwaitChannel(transport::DeadlineIn(backoff.Next()));
    }
  }
}

void GrpcControlPlane::Send() {
  Backoff backoff;
  transport::Clock::time_point next_heartbeat = transport::Clock::now();
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
    }
    if (transport::Clock::now() >= next_heartbeat) {
      const uint64_t member = member_id_.load();
      absl::Status s = Heartbeat(transport::DeadlineIn(options_.rpc_timeout));
      if (s.code() == absl::StatusCode::kNotFound) Recover(backoff, member);
      next_heartbeat = transport::Clock::now() + heartbeat_.load();
    }
    std::vector<StepReport> batch;
    transport::Deadline until =
        std::min(next_heartbeat, transport::DeadlineIn(std::chrono::milliseconds(100)));
    while (batch.size() < options_.report_batch) {
      std::optional<StepReport> r = reports_.Pop(until);
      if (!r) break;
      if (batch.empty())
        until = std::min(next_heartbeat, transport::DeadlineIn(options_.report_linger));
      batch.push_back(std::move(*r));
    }
    if (!batch.empty()) SendReports(batch);
    // Renewed on time even when idle, so the stream ends (and is
    // acknowledged) before its deadline.
    if (report_writer_ != nullptr && transport::Clock::now() >= report_renew_at_)
      CloseReportStream();
  }
  CloseReportStream();
}

void GrpcControlPlane::SendReports(const std::vector<StepReport>& batch) {
  if (report_writer_ != nullptr && transport::Clock::now() >= report_renew_at_) CloseReportStream();
  if (report_writer_ == nullptr) {
    report_ctx_ = std::make_unique<grpc::ClientContext>();
    // The deadline leaves the renewal (checked at least every 100 ms, or
    // after a heartbeat of up to rpc_timeout) room to finish the stream.
    Prepare(*report_ctx_,
            transport::DeadlineIn(options_.report_stream_window + 3 * options_.rpc_timeout));
    report_ack_.Clear();
    report_writer_ = stub_->ReportSteps(report_ctx_.get(), &report_ack_);
    report_renew_at_ = transport::Clock::now() + options_.report_stream_window;
    report_written_ = 0;
  }
  const uint64_t member = member_id_.load();
  const std::string secret = Secret();
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!report_writer_->Write(ToProto(batch[i], member, secret))) {
      // The stream broke (coordinator gone or restarted, or it refused a
      // report): this batch's rest is lost; the next batch opens a new one.
      lost_.fetch_add(batch.size() - i);
      CloseReportStream();
      return;
    }
    ++report_written_;
  }
}

void GrpcControlPlane::CloseReportStream() {
  if (report_writer_ == nullptr) return;
  report_writer_->WritesDone();
  if (!report_writer_->Finish().ok()) lost_.fetch_add(report_written_);
  report_writer_.reset();
  report_ctx_.reset();
}

}  // namespace gradex::member
