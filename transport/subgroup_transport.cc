#include "transport/subgroup_transport.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gradex::transport {

absl::StatusOr<std::unique_ptr<SubgroupTransport>> SubgroupTransport::Create(
    Transport* world, std::vector<int> members) {
  if (world == nullptr) return absl::InvalidArgumentError("subgroup of no transport");
  std::set<int> seen;
  int rank = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    const int m = members[i];
    if (m < 0 || m >= world->size() || !seen.insert(m).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("subgroup member ", m, " is not a distinct rank of ", world->size()));
    }
    if (m == world->rank()) rank = static_cast<int>(i);
  }
  if (rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", world->rank(), " is not in its own subgroup"));
  }
  return std::unique_ptr<SubgroupTransport>(new SubgroupTransport(world, std::move(members), rank));
}

absl::Status SubgroupTransport::CheckPeer(int peer) const {
  if (peer < 0 || peer >= size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("peer ", peer, " outside a subgroup of ", size()));
  }
  return absl::OkStatus();
}

absl::StatusOr<RequestId> SubgroupTransport::PostSend(int peer, uint64_t tag, Bytes payload) {
  if (absl::Status s = CheckPeer(peer); !s.ok()) return s;
  return inner().PostSend(members_[peer], tag, std::move(payload));
}

absl::StatusOr<RequestId> SubgroupTransport::PostRecv(int peer, uint64_t tag) {
  if (absl::Status s = CheckPeer(peer); !s.ok()) return s;
  return inner().PostRecv(members_[peer], tag);
}

absl::StatusOr<RequestId> SubgroupTransport::PostRecvAtMost(int peer, uint64_t tag,
                                                            size_t capacity) {
  if (absl::Status s = CheckPeer(peer); !s.ok()) return s;
  return inner().PostRecvAtMost(members_[peer], tag, capacity);
}

absl::Status SubgroupTransport::blame(int peer) const {
  if (peer < 0 || peer >= size()) return absl::OkStatus();
  return inner().blame(members_[peer]);
}

PeerCounters SubgroupTransport::counters(int peer) const {
  if (peer < 0 || peer >= size()) return {};
  return inner().counters(members_[peer]);
}

}  // namespace gradex::transport
