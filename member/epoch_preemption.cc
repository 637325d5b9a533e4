#include "member/epoch_preemption.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace gradex::member {

std::function<std::optional<std::string>()> SupersededBy(ControlPlane* control,
                                                         std::shared_ptr<const Plan> running) {
  return [control, running = std::move(running)]() -> std::optional<std::string> {
    std::shared_ptr<const Plan> p = control->LatestPlan();
    if (p == nullptr || p->epoch <= running->epoch) return std::nullopt;
    for (const PlanMember& m : running->members) {
      if (p->RankOf(m.agent_id) < 0) {
        return absl::StrCat("epoch ", running->epoch, " preempted: agent '", m.agent_id, "' (rank ",
                            m.rank, ") is not in epoch ", p->epoch);
      }
    }
    return std::nullopt;
  };
}

}  // namespace gradex::member
