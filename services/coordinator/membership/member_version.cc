#include "services/coordinator/membership/member_version.h"

#include "absl/strings/str_cat.h"
#include "version/version.h"

namespace gradex::coordinator::membership {
namespace {

// A member that sends no protocol predates the field, and every such
// release spoke protocol 1.
uint32_t ProtocolOf(const gradex::v1::JoinRequest& r) {
  return r.wire_protocol() == 0 ? 1 : r.wire_protocol();
}

std::string ReleaseOf(const gradex::v1::JoinRequest& r) {
  return r.gradex_version().empty() ? std::string("(unnamed, older than 0.1.0)")
                                    : r.gradex_version();
}

}  // namespace

absl::Status CheckWireProtocol(const gradex::v1::JoinRequest& r) {
  const uint32_t p = ProtocolOf(r);
  if (p >= version::kOldestWireProtocol && p <= version::kWireProtocol) return absl::OkStatus();
  const std::string speaks = version::kOldestWireProtocol == version::kWireProtocol
                                 ? absl::StrCat("wire protocol ", version::kWireProtocol)
                                 : absl::StrCat("wire protocols ", version::kOldestWireProtocol,
                                                "..", version::kWireProtocol);
  return absl::FailedPreconditionError(absl::StrCat(
      "wire_protocol: agent '", r.agent_id(), "' runs gradex ", ReleaseOf(r), " (wire protocol ", p,
      "); this coordinator runs gradex ", version::Version(), " and speaks ", speaks,
      ": run the same gradex release on the coordinator and every member"));
}

bool OtherRelease(const gradex::v1::JoinRequest& r) {
  return !r.gradex_version().empty() && r.gradex_version() != version::Version();
}

}  // namespace gradex::coordinator::membership
