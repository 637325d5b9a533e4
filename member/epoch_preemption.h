// When an epoch can no longer finish a step: a newer epoch dropped one of its
// members (an eviction or a leave). The agent ends the step in progress
// (WaitTracker::SetPreemption) and an entry still wiring up (its abandon
// check) on it, and enters the newer epoch.
#ifndef GRADEX_MEMBER_EPOCH_PREEMPTION_H_
#define GRADEX_MEMBER_EPOCH_PREEMPTION_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "member/control_plane.h"

namespace gradex::member {

// Polled (cheap: one plan read): the reason, naming the dropped agent, once
// `control`'s latest plan supersedes `running`; nothing before. `control`
// outlives the result.
std::function<std::optional<std::string>()> SupersededBy(ControlPlane* control,
                                                         std::shared_ptr<const Plan> running);

}  // namespace gradex::member

#endif  // GRADEX_MEMBER_EPOCH_PREEMPTION_H_
