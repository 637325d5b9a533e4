// Which members a coordinator can work with: the wire protocol a joiner
// speaks must be one this build speaks; another release of the same protocol
// may join (a rolling upgrade), but operators should hear of it.
#ifndef GRADEX_SERVICES_COORDINATOR_MEMBERSHIP_MEMBER_VERSION_H_
#define GRADEX_SERVICES_COORDINATOR_MEMBERSHIP_MEMBER_VERSION_H_

#include <set>
#include <string>

#include "absl/status/status.h"
#include "gradex/v1/coordinator.pb.h"

namespace gradex::coordinator::membership {

// FAILED_PRECONDITION naming both protocols (and both releases) when the
// joiner's wire protocol is outside the range this coordinator speaks.
absl::Status CheckWireProtocol(const gradex::v1::JoinRequest& r);

// True when the joiner names a release other than this coordinator's.
bool OtherRelease(const gradex::v1::JoinRequest& r);

// Remembers the other releases already warned about, so that the warning
// is logged once per release, not once per join.
class ReleaseWarnings {
 public:
  // True the first time `release` is seen.
  bool FirstSight(const std::string& release) { return seen_.insert(release).second; }

 private:
  std::set<std::string> seen_;
};

}  // namespace gradex::coordinator::membership

#endif  // GRADEX_SERVICES_COORDINATOR_MEMBERSHIP_MEMBER_VERSION_H_
