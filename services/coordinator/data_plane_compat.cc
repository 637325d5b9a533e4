// A joiner whose data plane cannot talk to the members' is refused at Join
// with a clear message, instead of failing (or, with
// packed UCX addresses, crashing) every agent at the next epoch's connect:
// pods built with another UCX version, or restricted to transports no
// member has.
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "services/coordinator/membership/membership.h"

namespace gradex::coordinator {
namespace {

// Unrestricted lists ("all", or UCX's "^exclusions") share anything.
bool SharesTransport(absl::string_view a, absl::string_view b) {
  auto open = [](absl::string_view l) { return l == "all" || (!l.empty() && l[0] == '^'); };
  if (open(a) || open(b)) return true;
  std::set<std::string> mine;
  for (absl::string_view t : absl::StrSplit(a, ',')) mine.insert(std::string(t));
  for (absl::string_view t : absl::StrSplit(b, ',')) {
    if (mine.count(std::string(t))) return true;
  }
  return false;
}

}  // namespace

absl::Status membership::Membership::CheckDataPlane(const gradex::v1::JoinRequest& r) const {
  // Tests of the logic join without a data plane; the gRPC service requires
  // both fields (validate.cc).
  if (r.ucx_version().empty()) return absl::OkStatus();
  for (const auto& [id, m] : members_) {
    if (m.agent_id == r.agent_id() || m.ucx_version.empty()) continue;
    if (m.ucx_version != r.ucx_version()) {
      return absl::FailedPreconditionError(
          absl::StrCat("ucx_version: this agent runs UCX ", r.ucx_version(),
                       ", the job's members UCX ", m.ucx_version, " (agent '", m.agent_id, "' on '",
                       m.host, "'): UCX peers of different versions cannot connect"));
    }
    if (!SharesTransport(m.ucx_transports, r.ucx_transports())) {
      return absl::FailedPreconditionError(
          absl::StrCat("ucx_transports: '", r.ucx_transports(), "' shares no transport with '",
                       m.ucx_transports, "' of agent '", m.agent_id, "' on '", m.host, "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace gradex::coordinator
