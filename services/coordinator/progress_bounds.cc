// Bounds on the epochs, steps and world sizes a member sends, from what the
// coordinator already knows (docs/design.md, Trust: numbers a member sends are
// bounded before they are stored). Unbounded, one Join with last_epoch 2^32
// pushed every later epoch past what agents accept, and one heartbeat with
// next_step 10^12 placed every later epoch a trillion steps ahead.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "services/coordinator/membership/membership.h"

namespace gradex::coordinator {
namespace {

absl::Status Bad(const char* field, uint64_t value, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", value, " ", why));
}

// Steps a job may have run in `d` at the fastest (kMaxStepsPerSecond).
uint64_t StepsIn(absl::Duration d) {
  const double s = std::clamp(absl::ToDoubleSeconds(d), 0.0, 1e7);
  return static_cast<uint64_t>(s * static_cast<double>(kMaxStepsPerSecond));
}

}  // namespace

uint64_t membership::Membership::StepBound(uint64_t id, absl::Time now) const {
  // Every rank of an epoch runs the same steps, so no member is ahead of the
  // others by more than what runs between their reports. With no other
  // member to compare with, the member's own last claim bounds its next.
  const uint64_t slack =
      2 * static_cast<uint64_t>(std::max(s_.plan_lead_steps, 0) + std::max(s_.barrier_period, 1)) +
      16;
  bool others = false;
  uint64_t bound = has_epoch() ? latest().effective_step : 0;
  for (const auto& [mid, m] : members_) {
    if (mid == id) continue;
    others = true;
    bound = std::max(bound, m.next_step + StepsIn(now - m.progress_at));
  }
  if (!others) {
    auto self = members_.find(id);
    if (self == members_.end()) return kMaxStep;  // nothing known: a rebuild's first member
    bound = std::max(bound, self->second.next_step + StepsIn(now - self->second.progress_at));
  }
  return std::min(bound + slack, kMaxStep);
}

absl::Status membership::Membership::CheckStep(uint64_t id, const char* field, uint64_t step,
                                               absl::Time now) const {
  const uint64_t bound = StepBound(id, now);
  if (step <= bound) return absl::OkStatus();
  return Bad(
      field, step,
      absl::StrCat("is ahead of the job (at most ", bound,
                   ": the furthest step the coordinator heard of, plus what can run since)"));
}

absl::Status membership::Membership::CheckEpoch(const char* field, uint64_t epoch) const {
  if (epoch <= epoch_counter_) return absl::OkStatus();
  return Bad(field, epoch, absl::StrCat("was never published (latest epoch ", epoch_counter_, ")"));
}

absl::Status membership::Membership::CheckJoinBounds(const gradex::v1::JoinRequest& r,
                                                     absl::Time now) const {
  auto old = by_agent_.find(r.agent_id());
  const uint64_t id = old == by_agent_.end() ? 0 : old->second;
  if (absl::Status s = CheckStep(id, "next_step", r.next_step(), now); !s.ok()) return s;
  if (r.last_epoch() == 0) return absl::OkStatus();
  if (r.last_epoch() > kMaxRejoinEpoch) {
    return Bad("last_epoch", r.last_epoch(), absl::StrCat("is over ", kMaxRejoinEpoch));
  }
  if (formed_any_ && r.last_epoch() > epoch_counter_) {
    return Bad("last_epoch", r.last_epoch(),
               absl::StrCat("was never published (latest epoch ", epoch_counter_, ")"));
  }
  if (r.last_world_size() > MaxWorld(s_)) {
    return Bad("last_world_size", static_cast<uint64_t>(r.last_world_size()),
               absl::StrCat("is over the job's largest epoch (", MaxWorld(s_), " members)"));
  }
  return absl::OkStatus();
}

}  // namespace gradex::coordinator
