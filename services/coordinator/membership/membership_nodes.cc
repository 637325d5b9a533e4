// The node as the failure unit of a collective job. A member's node is the
// host it joined with. When a member of the latest epoch is evicted for a
// failure (lease, entry, silence, bad frames), the other members on its node
// go in the same Tick, so the next epoch forms without the whole node, as
// torch elastic restarts a node's whole worker group: the node's survivors
// would otherwise leave it a rank short, which turns the hierarchical
// exchange of every node flat (an uneven layout), and under torchrun their
// processes are restarted anyway. A clean Leave takes out only the leaver.
// Not in parameter-server jobs (their workers and servers are independent),
// nor when the epoch has one node (the node is the whole job: its survivors
// go on).
#include <set>

#include "absl/strings/str_cat.h"
#include "services/coordinator/log.h"
#include "services/coordinator/membership/membership.h"

namespace gradex::coordinator::membership {
namespace {

const char* CauseName(MemberRecord::Cause cause) {
  switch (cause) {
    case MemberRecord::Cause::kLease:
      return "its lease expired";
    case MemberRecord::Cause::kEntry:
      return "it did not enter the epoch";
    case MemberRecord::Cause::kSilent:
      return "it went silent";
    case MemberRecord::Cause::kBadFrames:
      return "it sent bad frames";
    default:
      return "it was evicted";
  }
}

}  // namespace

int Membership::CountNodes(const std::vector<uint64_t>& roster) const {
  std::set<std::string> hosts;
  for (uint64_t id : roster) {
    if (const MemberRecord* m = Find(id)) hosts.insert(m->host);
  }
  return static_cast<int>(hosts.size());
}

void Membership::EvictNodeOf(const MemberRecord& dead, std::vector<uint64_t>* evicted) {
  if (s_.ps.enabled || !has_epoch() || latest().nodes <= 1) return;
  std::vector<uint64_t> mates;
  for (const auto& [id, m] : members_) {
    if (m.host == dead.host) mates.push_back(id);
  }
  for (uint64_t id : mates) {
    Evict(id, MemberRecord::Cause::kNode,
          absl::StrCat("node '", Quote(dead.host), "' is out: its member ", dead.id, " (agent '",
                       Quote(dead.agent_id), "') failed (", CauseName(dead.cause),
                       "), and a node fails as a whole"),
          evicted);
  }
}

}  // namespace gradex::coordinator::membership
