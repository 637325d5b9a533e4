// The gRPC control plane's joins: the first one, retried while a coordinator
// comes up, the re-joins after NOT_FOUND, and the waits on the channel between tries.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gradex/v1/coordinator.grpc.pb.h"
#include "member/backoff.h"
#include "member/grpc_control_plane_impl.h"
#include "member/grpc_messages.h"

namespace gradex::member {
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

}  // namespace

absl::StatusOr<JoinReply> GrpcControlPlane::DoJoin(transport::Deadline deadline) {
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

absl::StatusOr<JoinReply> GrpcControlPlane::FirstJoin(transport::Deadline deadline) {
  const transport::Clock::time_point start = transport::Clock::now();
  const transport::Clock::duration per_attempt =
      std::max<transport::Clock::duration>(deadline - start, std::chrono::milliseconds(100));
  const transport::Deadline give_up =
      options_.join_timeout.count() > 0 ? start + options_.join_timeout : deadline;
  Backoff backoff({std::chrono::milliseconds(100), std::chrono::milliseconds(2000), 2.0, 0.2});
  transport::Clock::time_point last_note = start;
  std::string refused;   // the last connection error, kept past a final attempt cut short
  int tls_refusals = 0;  // attempts in a row whose TLS session the coordinator closed
  for (int attempt = 1;; ++attempt) {
    absl::StatusOr<JoinReply> r = DoJoin(std::min(give_up, transport::Clock::now() + per_attempt));
    if (r.ok()) return r;
    const absl::Status& s = r.status();
    const transport::Clock::time_point now = transport::Clock::now();
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
          "no coordinator at ", options_.target, " within the join timeout (", std::lround(waited),
          " s, ", attempt,
          " attempts); last error: ", refused.empty() ? std::string(s.message()) : refused,
          ". Fix: start gradex-coordinator, or point GRADEX_COORDINATOR (gradex-agent "
          "--coordinator) at it; without TLS it listens on loopback only unless started with "
          "--insecure-listen-any"));
    }
    // At most one line every 5 s: an agent may wait minutes for its
    // coordinator's pod.
    if (options_.on_join_progress && (attempt == 1 || now - last_note >= std::chrono::seconds(5))) {
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

void GrpcControlPlane::Recover(Backoff& backoff, uint64_t seen) {
  absl::MutexLock recovering(&recover_mu_);
  if (member_id_.load() != seen) return;
  if (DoJoin(transport::DeadlineIn(options_.rpc_timeout)).ok()) {
    backoff.Reset();
    return;
  }
  AwaitChannel(transport::DeadlineIn(backoff.Next()));
}

void GrpcControlPlane::AwaitChannel(transport::Deadline until) {
  const bool was_ready = channel_->GetState(/*try_to_connect=*/true) == GRPC_CHANNEL_READY;
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    const transport::Clock::time_point now = transport::Clock::now();
    if (now >= until) return;
    // Slices of 100 ms, so that Stop() is seen promptly.
    const transport::Clock::time_point slice =
        std::min(until, now + std::chrono::milliseconds(100));
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

}  // namespace gradex::member
