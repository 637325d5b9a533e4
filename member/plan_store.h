// The plans a control plane has received: the newest for LatestPlan(), and
// the last few versions, so that ranks agreeing on a version in-band (the
// smallest newest one) all still hold it. Thread-safe; readers never wait on
// the network.
#ifndef GRADEX_MEMBER_PLAN_STORE_H_
#define GRADEX_MEMBER_PLAN_STORE_H_

#include <cstdint>
#include <deque>
#include <memory>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "member/control_plane.h"

namespace gradex::member {

class PlanStore {
 public:
  static constexpr size_t kKeep = 32;

  // Adds a plan; versions must increase (an older or equal one is refused:
  // a restarted coordinator must keep them monotonic).
  absl::Status Publish(Plan plan);
  std::shared_ptr<const Plan> Latest() const;
  std::shared_ptr<const Plan> Version(uint64_t version) const;

 private:
  mutable absl::Mutex mu_;
  std::deque<std::shared_ptr<const Plan>> plans_ ABSL_GUARDED_BY(mu_);  // oldest first
};

}  // namespace gradex::member

#endif  // GRADEX_MEMBER_PLAN_STORE_H_
