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
#include "transport/transport.h"

namespace gradex {

class SubgroupTransport : public Transport {
 public:
  // INVALID_ARGUMENT unless `members` are distinct ranks of `world` that
  // include world->rank(). `world` outlives the view.
  static absl::StatusOr<std::unique_ptr<SubgroupTransport>> Create(Transport* world,
                                                                   std::vector<int> members);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  // The underlying rank of the view's rank `peer`.
  int world_rank(int peer) const { return members_[peer]; }
  Transport* world() const { return world_; }

  absl::StatusOr<RequestId> PostSend(int peer, uint64_t tag, Bytes payload) override;
  absl::StatusOr<RequestId> PostRecv(int peer, uint64_t tag) override;
  absl::StatusOr<RequestId> PostRecvAtMost(int peer, uint64_t tag, size_t capacity) override;
  absl::Status Wait(RequestId request, Deadline deadline, Bytes* out) override {
    return world_->Wait(request, deadline, out);
  }
  absl::StatusOr<bool> Test(RequestId request, Bytes* out) override {
    return world_->Test(request, out);
  }
  // Both act on the whole underlying transport: a view's requests are its
  // requests, and a failed call gives up the whole communicator.
  void CancelAll(Deadline deadline) override { world_->CancelAll(deadline); }
  void Abort(Deadline deadline) override { world_->Abort(deadline); }
  bool aborted() const override { return world_->aborted(); }
  absl::Status blame(int peer) const override;
  PeerCounters counters(int peer) const override;
  // Counters are read as differences (the call frame's snapshots): a view
  // never resets the underlying transport's, which other groups share.
  void ResetCounters() override {}
  Bytes TakeBuffer(size_t bytes) override { return world_->TakeBuffer(bytes); }
  void Recycle(Bytes buffer) override { world_->Recycle(std::move(buffer)); }

 private:
  SubgroupTransport(Transport* world, std::vector<int> members, int rank)
      : world_(world), members_(std::move(members)), rank_(rank) {}
  absl::Status CheckPeer(int peer) const;

  Transport* const world_;
  const std::vector<int> members_;
  const int rank_;
};

}  // namespace gradex

#endif  // GRADEX_TRANSPORT_SUBGROUP_TRANSPORT_H_
