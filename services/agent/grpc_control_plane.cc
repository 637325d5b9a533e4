#include "services/agent/grpc_control_plane.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gradex/v1/coordinator.grpc.pb.h"
#include "services/agent/backoff.h"
#include "services/agent/grpc_messages.h"
#include "services/agent/plan_store.h"
#include "services/agent/report_queue.h"

namespace gradex::agent {
namespace {

namespace pb = ::gradex::v1;

// What to do about a final refusal, for the codes a first deployment meets.
std::string JoinRefusalFix(absl::StatusCode code) {
  if (code == absl::StatusCode::kUnauthenticated) {
    return ". Fix: give this member the job's token, the one in the coordinator's --token-file "
           "(GRADEX_TOKEN or GRADEX_TOKEN_FILE; gradex-agent --token-file)";
  }
  return "";
}

class GrpcControlPlane final : public ControlPlane {
 public:
  GrpcControlPlane(const GrpcControlPlaneOptions& options, std::shared_ptr<grpc::Channel> channel)
      : options_(options),
        channel_(channel),
        stub_(pb::Coordinator::NewStub(std::move(channel))),
        reports_(options.report_capacity) {}
  ~GrpcControlPlane() override { Stop(); }

  absl::StatusOr<JoinReply> Join(const JoinRequest& request, Deadline deadline) override {
    {
      absl::MutexLock lock(&mu_);
      join_ = request;
    }
    absl::StatusOr<JoinReply> r = started_.load() ? DoJoin(deadline) : FirstJoin(deadline);
    if (r.ok() && !started_.exchange(true)) {
      watcher_ = std::thread([this] { Watch(); });
      sender_ = std::thread([this] { Send(); });
    }
    return r;
  }

  absl::Status Heartbeat(Deadline deadline) override {
    pb::HeartbeatRequest req;
    req.set_member_id(member_id_.load());
    req.set_member_secret(Secret());
    std::shared_ptr<const Plan> p = store_.Latest();
    req.set_epoch(p == nullptr ? 0 : p->epoch);
    req.set_next_step(next_step_.load());
    if (std::shared_ptr<const WaitSource> w = std::atomic_load(&waits_)) FillWait(*w, &req);
    pb::HeartbeatResponse resp;
    grpc::ClientContext ctx;
    Prepare(ctx, deadline);
    return FromGrpc(stub_->Heartbeat(&ctx, req, &resp), "heartbeat");
  }

  absl::Status Leave(Deadline deadline) override {
    Stop();
    pb::LeaveRequest req;
    req.set_member_id(member_id_.load());
    req.set_member_secret(Secret());
    req.set_reason("agent finished");
    pb::LeaveResponse resp;
    grpc::ClientContext ctx;
    Prepare(ctx, deadline);
    return FromGrpc(stub_->Leave(&ctx, req, &resp), "leave");
  }

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
  void Prepare(grpc::ClientContext& ctx, Deadline deadline) {
    ctx.set_deadline(std::chrono::system_clock::now() + (deadline - Clock::now()));
    absl::MutexLock lock(&mu_);
    ctx.AddMetadata("authorization", "Bearer " + join_.token);
  }

  // This membership's secret (JoinResponse.member_secret), sent with every
  // call for it.
  std::string Secret() {
    absl::MutexLock lock(&mu_);
    return secret_;
  }

  absl::StatusOr<JoinReply> DoJoin(Deadline deadline) {
    pb::JoinRequest req;
    {
      absl::MutexLock lock(&mu_);
      req = JoinToProto(join_, next_step_.load());
      // The agent id belongs to this process's live membership (if any): a
      // re-join proves it with that membership's secret.
      req.set_member_secret(secret_);
      // A re-join from the background knows more than the agent's last call.
      if (std::shared_ptr<const Plan> p = store_.Latest();
          p != nullptr && p->epoch > join_.last_epoch && p->RankOf(join_.agent_id) >= 0) {
        req.set_last_epoch(p->epoch);
        req.set_last_rank(p->RankOf(join_.agent_id));
        req.set_last_world_size(p->world());
      }
    }
    pb::JoinResponse resp;
    grpc::ClientContext ctx;
    Prepare(ctx, deadline);
    if (absl::Status s = FromGrpc(stub_->Join(&ctx, req, &resp), "join"); !s.ok()) return s;
    {
      // Stored before the id, so a thread that sees the new id sends its secret.
      absl::MutexLock lock(&mu_);
      secret_ = resp.member_secret();
    }
    member_id_.store(resp.member_id());
    if (resp.coordinator_incarnation() != incarnation_.load()) {
      // A restarted coordinator may number its plans afresh: keep ours
      // increasing.
      absl::MutexLock lock(&mu_);
      std::shared_ptr<const Plan> p = store_.Latest();
      version_offset_ = p == nullptr ? 0 : p->version;
      known_version_ = 0;
      incarnation_.store(resp.coordinator_incarnation());
    }
    heartbeat_ = std::chrono::milliseconds(
        std::max<uint32_t>(resp.heartbeat_interval_ms(), resp.lease_duration_ms() / 3));
    JoinReply reply{absl::StrCat(resp.member_id()),
                    std::chrono::milliseconds(resp.lease_duration_ms())};
    if (resp.has_plan_config()) {
      const pb::JobPlanConfig& c = resp.plan_config();
      JobPlanConfig plan{c.algorithm(), c.density(), c.teams(), c.auto_teams(), {}};
      for (const auto& [name, value] : c.params()) plan.params.emplace(name, value);
      reply.plan_config = plan;
      absl::MutexLock lock(&mu_);
      plan_config_ = std::move(plan);
    }
    return reply;
  }

  // The first join retries what a coordinator coming up would fix (an agent
  // may start before it, e.g. when a scheduler starts every pod at once) until
  // options_.join_timeout (or `deadline` when 0); each attempt is bounded like
  // `deadline`. A refusal (bad token, bad request, job full) is final at once.
  absl::StatusOr<JoinReply> FirstJoin(Deadline deadline) {
    const Clock::time_point start = Clock::now();
    const Clock::duration per_attempt =
        std::max<Clock::duration>(deadline - start, std::chrono::milliseconds(100));
    const Deadline give_up =
        options_.join_timeout.count() > 0 ? start + options_.join_timeout : deadline;
    Backoff backoff({std::chrono::milliseconds(100), std::chrono::milliseconds(2000), 2.0, 0.2});
    Clock::time_point last_note = start;
    std::string refused;   // the last connection error, kept past a final attempt cut short
    int tls_refusals = 0;  // attempts in a row whose TLS session the coordinator closed
    for (int attempt = 1;; ++attempt) {
      absl::StatusOr<JoinReply> r = DoJoin(std::min(give_up, Clock::now() + per_attempt));
      if (r.ok()) return r;
      const absl::Status& s = r.status();
      const Clock::time_point now = Clock::now();
      const double waited = std::chrono::duration<double>(now - start).count();
      if (!IsTransientJoinError(s.code())) {
        return absl::Status(
            s.code(), absl::StrCat("the coordinator at ", options_.target,
                                   " refused the join: ", s.message(), JoinRefusalFix(s.code())));
      }
      tls_refusals = LooksLikeTlsRefusal(options_, s) ? tls_refusals + 1 : 0;
      if (tls_refusals >= 2) return TlsRefused(options_, s);
      if (s.code() == absl::StatusCode::kUnavailable) refused = std::string(s.message());
      if (now >= give_up) {
        return absl::UnavailableError(absl::StrCat(
            "no coordinator at ", options_.target, " within the join timeout (",
            std::lround(waited), " s, ", attempt,
            " attempts); last error: ", refused.empty() ? std::string(s.message()) : refused,
            ". Fix: start gradex-coordinator, or point GRADEX_COORDINATOR (gradex-agent "
            "--coordinator) at it; without TLS it listens on loopback only unless started with "
            "--insecure-listen-any"));
      }
      // At most one line every 5 s: an agent may wait minutes for its
      // coordinator's pod.
      if (options_.on_join_progress &&
          (attempt == 1 || now - last_note >= std::chrono::seconds(5))) {
        options_.on_join_progress(absl::StrCat("waiting for coordinator at ", options_.target, ": ",
                                               absl::StatusCodeToString(s.code()), " (attempt ",
                                               attempt, ", ", std::lround(waited), " s)"));
        last_note = now;
      }
      AwaitChannel(std::min(give_up, now + backoff.Next()));
      absl::MutexLock lock(&mu_);
      if (stopping_) return absl::CancelledError("join: control plane stopped");
    }
  }

  // Re-join after NOT_FOUND or a broken connection; `seen` is the member id
  // the failure was seen with. One thread at a time, and not at all when the
  // other one has re-joined since (a second re-join would replace the first).
  void Recover(Backoff& backoff, uint64_t seen) {
    absl::MutexLock recovering(&recover_mu_);
    if (member_id_.load() != seen) return;
    if (DoJoin(DeadlineIn(options_.rpc_timeout)).ok()) {
      backoff.Reset();
      return;
    }
    AwaitChannel(DeadlineIn(backoff.Next()));
  }

  // Waits until `until`, or on Stop, or as soon as the channel turns READY when
  // it was not (the coordinator is back: retry now, not at the end of the
  // backoff). Waiting on the channel also matters in itself: with the sync
  // API only a thread inside a call polls the channel's sockets, and while
  // the coordinator is down every call fails at once, so a reconnect that
  // gRPC started after its own backoff would otherwise complete only at its
  // backup poll (every 5 s) -- that, plus this agent's own growing backoff,
  // was the ~4-10 s re-registration after a coordinator restart.
  void AwaitChannel(Deadline until) {
    const bool was_ready = channel_->GetState(/*try_to_connect=*/true) == GRPC_CHANNEL_READY;
    for (;;) {
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) return;
      }
      const Clock::time_point now = Clock::now();
      if (now >= until) return;
      // Slices of 100 ms, so that Stop() is seen promptly.
      const Clock::time_point slice = std::min(until, now + std::chrono::milliseconds(100));
      const grpc_connectivity_state state = channel_->GetState(/*try_to_connect=*/true);
      if (state == GRPC_CHANNEL_READY) {
        // READY from the start: the failure was not the connection (e.g. the
        // server answered UNAVAILABLE); back off in full.
        if (!was_ready) return;
        absl::MutexLock lock(&mu_);
        mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::FromChrono(slice - now));
        continue;
      }
      channel_->WaitForStateChange(state, std::chrono::system_clock::now() + (slice - now));
    }
  }

  void Watch() {
    Backoff backoff;
    for (;;) {
      pb::WatchPlanRequest req;
      auto ctx = std::make_unique<grpc::ClientContext>();
      Prepare(*ctx, DeadlineIn(options_.watch_window));
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
        AwaitChannel(DeadlineIn(backoff.Next()));
      }
    }
  }

  void Send() {
    Backoff backoff;
    Clock::time_point next_heartbeat = Clock::now();
    for (;;) {
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) break;
      }
      if (Clock::now() >= next_heartbeat) {
        const uint64_t member = member_id_.load();
        absl::Status s = Heartbeat(DeadlineIn(options_.rpc_timeout));
        if (s.code() == absl::StatusCode::kNotFound) Recover(backoff, member);
        next_heartbeat = Clock::now() + heartbeat_.load();
      }
      std::vector<StepReport> batch;
      Deadline until = std::min(next_heartbeat, DeadlineIn(std::chrono::milliseconds(100)));
      while (batch.size() < options_.report_batch) {
        std::optional<StepReport> r = reports_.Pop(until);
        if (!r) break;
        if (batch.empty()) until = std::min(next_heartbeat, DeadlineIn(options_.report_linger));
        batch.push_back(std::move(*r));
      }
      if (!batch.empty()) SendReports(batch);
      // Renewed on time even when idle, so the stream ends (and is
      // acknowledged) before its deadline.
      if (report_writer_ != nullptr && Clock::now() >= report_renew_at_) CloseReportStream();
    }
    CloseReportStream();
  }

  // Reports go out on one ReportSteps stream held open for
  // report_stream_window, one Write each: a call per batch cost ~0.3-0.6 ms
  // of CPU on each side (bench/coordinator_overhead), a Write a few us. The
  // coordinator applies each report as it reads it.
  void SendReports(const std::vector<StepReport>& batch) {
    if (report_writer_ != nullptr && Clock::now() >= report_renew_at_) CloseReportStream();
    if (report_writer_ == nullptr) {
      report_ctx_ = std::make_unique<grpc::ClientContext>();
      // The deadline leaves the renewal (checked at least every 100 ms, or
      // after a heartbeat of up to rpc_timeout) room to finish the stream.
      Prepare(*report_ctx_, DeadlineIn(options_.report_stream_window + 3 * options_.rpc_timeout));
      report_ack_.Clear();
      report_writer_ = stub_->ReportSteps(report_ctx_.get(), &report_ack_);
      report_renew_at_ = Clock::now() + options_.report_stream_window;
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

  // Ends the stream. When the coordinator did not confirm it (no ack), every
  // report written on it counts as lost (an upper bound: it applies each
  // report as it reads it, so most may have landed).
  void CloseReportStream() {
    if (report_writer_ == nullptr) return;
    report_writer_->WritesDone();
    if (!report_writer_->Finish().ok()) lost_.fetch_add(report_written_);
    report_writer_.reset();
    report_ctx_.reset();
  }

  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      if (watch_ctx_ != nullptr) watch_ctx_->TryCancel();
    }
    reports_.Close();
    if (watcher_.joinable()) watcher_.join();
    if (sender_.joinable()) sender_.join();
  }

  const GrpcControlPlaneOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::Coordinator::Stub> stub_;
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
  pb::ReportAck report_ack_;
  std::unique_ptr<grpc::ClientWriter<pb::StepReport>> report_writer_;
  Clock::time_point report_renew_at_{};
  uint64_t report_written_ = 0;
  std::thread watcher_, sender_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ControlPlane>> CreateGrpcControlPlane(
    const GrpcControlPlaneOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = CoordinatorChannel(options);
  if (!channel.ok()) return channel.status();
  return std::unique_ptr<ControlPlane>(new GrpcControlPlane(options, *std::move(channel)));
}

}  // namespace gradex::agent
