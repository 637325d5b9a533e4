#include "member/plan_store.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace gradex::member {

int Plan::RankOf(const std::string& agent_id) const {
  for (const PlanMember& m : members) {
    if (m.agent_id == agent_id) return m.rank;
  }
  return -1;
}

absl::Status PlanStore::Publish(Plan plan) {
  absl::MutexLock lock(&mu_);
  if (!plans_.empty() && plan.version <= plans_.back()->version) {
    return absl::FailedPreconditionError(
        absl::StrCat("plan version ", plan.version, " is not newer than ", plans_.back()->version));
  }
  plans_.push_back(std::make_shared<const Plan>(std::move(plan)));
  while (plans_.size() > kKeep) plans_.pop_front();
  return absl::OkStatus();
}

std::shared_ptr<const Plan> PlanStore::Latest() const {
  absl::MutexLock lock(&mu_);
  return plans_.empty() ? nullptr : plans_.back();
}

std::shared_ptr<const Plan> PlanStore::Version(uint64_t version) const {
  absl::MutexLock lock(&mu_);
  for (const auto& p : plans_) {
    if (p->version == version) return p;
  }
  return nullptr;
}

}  // namespace gradex::member
