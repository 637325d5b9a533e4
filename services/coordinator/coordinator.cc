// The Coordinator's members' calls (Join, Heartbeat, Leave, Report) and its
// queries; the tick, the stall checks and the watchers have files of their own.
#include "services/coordinator/coordinator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "catalog/bucket_algorithms.h"
#include "catalog/catalog.h"
#include "services/coordinator/log.h"
#include "services/coordinator/membership/member_secret.h"
#include "version/version.h"

namespace gradex::coordinator {

Coordinator::Coordinator(JobSettings settings, CoordinatorMetrics* metrics)
    : s_(std::move(settings)),
      metrics_(metrics),
      incarnation_(std::random_device{}() * 0x100000000ull + std::random_device{}()),
      rng_(std::random_device{}() ^ (incarnation_ << 1)),
      membership_(s_),
      stalls_(s_.step_deadline),
      version_(static_cast<uint64_t>(absl::ToUnixMicros(absl::Now()))),
      shards_(s_.ps.server_shards, s_.ps.max_workers),
      view_(metrics ? &metrics->member_info : nullptr,
            metrics ? &metrics->members_unlisted : nullptr) {
  agreed_.teams = controllers::ChooseTeams(s_.algorithm, s_.teams, s_.world_size,
                                           s_.prefer_rsag || s_.auto_teams);
  // A pinned interval (params.covap_interval) is what the plan carries.
  auto pinned = s_.params.find(kCovapInterval);
  agreed_.covap_interval =
      pinned != s_.params.end() ? static_cast<int>(pinned->second) : s_.covap_interval;
  covap_history_.push_back({0, agreed_.covap_interval});
  UpdateGaugesLocked();
}

absl::StatusOr<gradex::v1::JoinResponse> Coordinator::Join(const gradex::v1::JoinRequest& r,
                                                           absl::Time now) {
  if (absl::Status v = membership::CheckWireProtocol(r); !v.ok()) return v;
  absl::MutexLock lock(&mu_);
  if (membership::OtherRelease(r)) {
    if (metrics_) metrics_->version_mismatch_joins.Increment();
    if (release_warnings_.FirstSight(r.gradex_version())) {
      Log("warning: agent '", Quote(r.agent_id()), "' on '", Quote(r.host()), "' runs gradex ",
          Quote(r.gradex_version()), ", this coordinator ", version::Version(),
          " (same wire protocol, so it joins; run one release in a job)");
    }
  }
  uint64_t id = 0;
  while (id == 0 || membership_.Find(id) != nullptr) id = rng_();
  uint64_t replaced = 0;
  absl::Status st = membership_.Join(r, id, now, &replaced);
  if (!st.ok()) return st;
  if (replaced != 0) gone_.push_back(replaced);  // its watchers end at the next tick
  std::string secret = membership::NewMemberSecret();
  membership_.SetSecret(id, secret);
  if (metrics_) (r.last_epoch() > 0 ? metrics_->joins_rejoin : metrics_->joins_fresh).Increment();
  Log("join: member ", id, " agent '", Quote(r.agent_id()), "' host '", Quote(r.host()),
      "' local rank ", r.local_rank(),
      r.last_epoch() > 0
          ? absl::StrCat(" (rejoin, last epoch ", r.last_epoch(), " rank ", r.last_rank(), ")")
          : "");
  UpdateGaugesLocked();
  gradex::v1::JoinResponse resp;
  resp.set_member_id(id);
  const int64_t lease_ms = absl::ToInt64Milliseconds(s_.lease);
  resp.set_lease_duration_ms(static_cast<uint32_t>(lease_ms));
  resp.set_heartbeat_interval_ms(static_cast<uint32_t>(std::max<int64_t>(lease_ms / 3, 1)));
  resp.set_coordinator_incarnation(incarnation_);
  resp.set_member_secret(std::move(secret));
  gradex::v1::JobPlanConfig* plan = resp.mutable_plan_config();
  plan->set_algorithm(s_.auto_algorithm ? kAutoAlgorithm : s_.algorithm);
  plan->set_density(s_.density);
  plan->set_teams(s_.teams);
  plan->set_auto_teams(s_.auto_teams);
  for (const auto& [name, value] : s_.params) (*plan->mutable_params())[name] = value;
  return resp;
}

absl::StatusOr<gradex::v1::HeartbeatResponse> Coordinator::Heartbeat(
    const gradex::v1::HeartbeatRequest& r, absl::Time now) {
  absl::MutexLock lock(&mu_);
  absl::Status st = membership_.Heartbeat(r, now);
  if (!st.ok()) return st;
  gradex::v1::HeartbeatResponse resp;
  resp.set_lease_duration_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(s_.lease)));
  resp.set_plan_version(version_);
  resp.set_epoch(membership_.has_epoch() ? membership_.latest().number : 0);
  return resp;
}

absl::Status Coordinator::Leave(const gradex::v1::LeaveRequest& r, absl::Time now) {
  {
    absl::MutexLock lock(&mu_);
    absl::Status st = membership_.Leave(r.member_id());
    if (!st.ok()) return st;
    if (metrics_) metrics_->leaves.Increment();
    Log("leave: member ", r.member_id(), r.reason().empty() ? "" : ": ", Quote(r.reason()));
    gone_.push_back(r.member_id());
  }
  Tick(now);  // the survivors' new epoch goes out now, not at the next tick
  return absl::OkStatus();
}

absl::Status Coordinator::Report(const gradex::v1::StepReport& r, absl::Time now, bool* accepted) {
  absl::MutexLock lock(&mu_);
  *accepted = false;
  const membership::MemberRecord* m = membership_.Find(r.member_id());
  if (m == nullptr) return absl::NotFoundError("unknown member: join again");
  if (absl::Status st = membership_.CheckEpoch("epoch", r.epoch()); !st.ok()) return st;
  if (r.step() >= kMaxStep) return absl::InvalidArgumentError("step: over 2^48");
  if (absl::Status st = membership_.CheckStep(r.member_id(), "step", r.step() + 1, now); !st.ok()) {
    return st;
  }
  membership_.NoteStep(r.member_id(), r.step(), now);
  membership_.NoteEpoch(r.member_id(), r.epoch());
  const membership::Epoch* e = membership_.FindEpoch(r.epoch());
  const int rank = e ? membership_.RankIn(*e, r.member_id()) : -1;
  if (rank < 0) {
    if (metrics_) metrics_->reports_ignored.Increment();
    return absl::OkStatus();
  }
  *accepted = true;
  if (metrics_) metrics_->reports_accepted.Increment();
  if (!r.error().empty()) {
    if (metrics_) metrics_->step_failures.Increment();
    Log("step ", r.step(), " failed on rank ", rank, " (member ", r.member_id(), ", host '",
        Quote(m->host), "', epoch ", r.epoch(), "): ", Quote(r.error()));
    // A frame it refused names its sender, a rank of the same epoch (bounded
    // by its roster): that member goes at the next tick.
    if (const uint32_t b = r.blamed_rank_plus_one(); b > 0 && b <= e->roster.size()) {
      const int blamed = static_cast<int>(b - 1);
      if (membership_.BlameBadFrames(
              r.member_id(), *e, blamed,
              absl::StrCat("sent a frame that rank ", rank, " refused in step ", r.step(),
                           " of epoch ", r.epoch(), " (blamed by member ", r.member_id(), ")"))) {
        if (metrics_) metrics_->bad_frame_blames.Increment();
      }
    }
    return absl::OkStatus();
  }
  membership_.StepSucceeded(r.member_id());
  // Controllers follow the latest epoch only (they restart with each epoch).
  if (&membership_.latest() == e) {
    FeedControllersLocked(r, rank, static_cast<int>(e->roster.size()), now);
  }
  return absl::OkStatus();
}

std::shared_ptr<const gradex::v1::Plan> Coordinator::plan() const {
  absl::MutexLock lock(&mu_);
  return plan_;
}

absl::Status Coordinator::Authorize(uint64_t member, absl::string_view secret) const {
  absl::MutexLock lock(&mu_);
  const membership::MemberRecord* m = membership_.Find(member);
  if (m == nullptr) return absl::NotFoundError("unknown member: join again");
  if (!membership::SecretMatches(m->secret, secret)) {
    return absl::PermissionDeniedError(absl::StrCat("member_secret is not member ", member,
                                                    "'s (a member speaks only for itself)"));
  }
  return absl::OkStatus();
}

bool Coordinator::IsMember(uint64_t id) const {
  absl::MutexLock lock(&mu_);
  return membership_.Find(id) != nullptr;
}

uint64_t Coordinator::epoch() const {
  absl::MutexLock lock(&mu_);
  return membership_.has_epoch() ? membership_.latest().number : 0;
}

size_t Coordinator::members() const {
  absl::MutexLock lock(&mu_);
  return membership_.size();
}

uint64_t Coordinator::stalled_steps() const {
  absl::MutexLock lock(&mu_);
  return stalled_steps_;
}

}  // namespace gradex::coordinator
