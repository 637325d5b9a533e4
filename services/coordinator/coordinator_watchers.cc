// The Coordinator's plan watchers (the members' WatchPlan streams): told of a
// new plan, or that their member is gone, outside the coordinator's lock.
#include <algorithm>

#include "services/coordinator/coordinator.h"

namespace gradex::coordinator {

void Coordinator::Notify(const std::vector<uint64_t>& gone, bool plan_changed) {
  std::vector<std::pair<uint64_t, std::shared_ptr<PlanWatcher>>> ws;
  {
    absl::MutexLock lock(&watch_mu_);
    ws = watchers_;
  }
  for (auto& [member, w] : ws) {
    if (std::find(gone.begin(), gone.end(), member) != gone.end()) {
      w->MemberGone();
    } else if (plan_changed) {
      w->PlanChanged();
    }
  }
}

void Coordinator::Subscribe(uint64_t member, std::shared_ptr<PlanWatcher> w) {
  std::vector<std::shared_ptr<PlanWatcher>> old;
  {
    absl::MutexLock lock(&watch_mu_);
    for (auto it = watchers_.begin(); it != watchers_.end();) {
      if (it->first == member) {
        old.push_back(std::move(it->second));
        it = watchers_.erase(it);
      } else {
        ++it;
      }
    }
    watchers_.emplace_back(member, std::move(w));
  }
  for (const std::shared_ptr<PlanWatcher>& o : old) o->Superseded();  // without the lock
}

size_t Coordinator::watchers() const {
  absl::MutexLock lock(&watch_mu_);
  return watchers_.size();
}

void Coordinator::Unsubscribe(const PlanWatcher* w) {
  absl::MutexLock lock(&watch_mu_);
  watchers_.erase(std::remove_if(watchers_.begin(), watchers_.end(),
                                 [w](const auto& p) { return p.second.get() == w; }),
                  watchers_.end());
}

}  // namespace gradex::coordinator
