// A view of some ranks of a transport as a transport of their own: rank i of
// the view is members[i] of the underlying one. The hierarchical exchange
// runs its node-local stages on the view of the node's ranks and the
// inter-node algorithm on the view of the ranks that hold the same node
// shard, so every algorithm runs unchanged on a group. Messages, matching,
// deadlines and counters are the underlying transport's (a view owns
// nothing): its counters are those of its members, so a call on a view
// counts only the bytes exchanged inside the group.
#ifndef GRADEX_TRANSPORT_SUBGROUP_TRANSPORT_H_
#define GRADEX_TRANSPORT_SUBGROUP_TRANSPORT_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "transport/forwarding_transport.h"

namespace gradex::transport {

// Waits, tests, cancels, aborts, buffers and the receive profile are the
// underlying transport's (ForwardingTransport): a view's requests are its
// requests, and a failed call gives up the whole communicator.
class SubgroupTransport : public ForwardingTransport {
 public:
  // INVALID_ARGUMENT unless `members` are distinct ranks of `world` that
  // include world->rank(). `world` outlives the view.
  static absl::StatusOr<std::unique_ptr<SubgroupTransport>> Create(Transport* world,
                                                                   std::vector<int> members);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  // The underlying rank of the view's rank `peer`.
  int world_rank(int peer) const { return members_[peer]; }

  absl::StatusOr<RequestId> PostSend(int peer, uint64_t tag, Bytes payload) override;
  absl::StatusOr<RequestId> PostRecv(int peer, uint64_t tag) override;
  absl::StatusOr<RequestId> PostRecvAtMost(int peer, uint64_t tag, size_t capacity) override;
  absl::Status blame(int peer) const override;
  PeerCounters counters(int peer) const override;
  // Counters are read as differences (the call frame's snapshots): a view
  // never resets the underlying transport's, which other groups share.
  void ResetCounters() override {}

 private:
  SubgroupTransport(Transport* world, std::vector<int> members, int rank)
      : ForwardingTransport(*world), members_(std::move(members)), rank_(rank) {}
  absl::Status CheckPeer(int peer) const;

  const std::vector<int> members_;
  const int rank_;
};

}  // namespace gradex::transport

#endif  // GRADEX_TRANSPORT_SUBGROUP_TRANSPORT_H_
