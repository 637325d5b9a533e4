// Each membership's secret: the job token admits a
// member, then the secret, given only to the caller that joined, proves
// every later call comes from that member (docs/design.md, Trust). Member ids are
// public: plans list them.
#ifndef GRADEX_SERVICES_COORDINATOR_MEMBERSHIP_MEMBER_SECRET_H_
#define GRADEX_SERVICES_COORDINATOR_MEMBERSHIP_MEMBER_SECRET_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace gradex::coordinator::membership {

inline constexpr size_t kMemberSecretBytes = 32;

// 32 bytes from the OS's random source (std::random_device reads getrandom
// on Linux), never from the coordinator's member-id generator.
std::string NewMemberSecret();
// Constant time in the length of `expected`, so a guess learns nothing from
// how long the comparison took. An empty `expected` matches nothing.
bool SecretMatches(absl::string_view expected, absl::string_view given);

}  // namespace gradex::coordinator::membership

#endif  // GRADEX_SERVICES_COORDINATOR_MEMBERSHIP_MEMBER_SECRET_H_
