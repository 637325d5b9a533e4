// The in-process fabric behind the loopback and simulated transports: P ranks
// as threads of one process, messages matched per (source, destination, tag)
// in posting order, dead ranks failing their peers at once. A DeliveryPolicy
// decides what a message costs in time; the loopback transport has none (real
// time only), the simulated one keeps α-β clocks (sim_transport.h). Internal
// to transport/: callers use loopback_transport.h and sim_transport.h.
#ifndef GRADEX_TRANSPORT_LOOPBACK_FABRIC_H_
#define GRADEX_TRANSPORT_LOOPBACK_FABRIC_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include "transport/transport.h"

namespace gradex::transport {

// When messages arrive and sends complete, in the policy's own (virtual)
// time. Called with the fabric's lock held, in the order the fabric sees the
// events, so a policy needs no lock of its own for these three calls.
class DeliveryPolicy {
 public:
  virtual ~DeliveryPolicy() = default;
  // `self` posts `bytes` to `peer`. Returns the message's stamp: when its
  // last byte reaches the receiver, which is also when the send completes.
  virtual double Posted(int self, int peer, size_t bytes) = 0;
  // Wait or a successful Test on a send stamped `stamp`.
  virtual void SendCompleted(int self, double stamp) = 0;
  // A receive of `bytes` stamped `stamp` completed on `self`.
  virtual void Received(int self, double stamp, size_t bytes) = 0;
};

class LoopbackFabric {
 public:
  // `policy` may be null: then messages cost no time but their real one.
  LoopbackFabric(int size, std::unique_ptr<DeliveryPolicy> policy);

  int size() const { return size_; }

  absl::StatusOr<RequestId> PostSend(int self, int peer, uint64_t tag, Bytes payload);
  // `capacity`: the longest message the receive takes (PostRecvAtMost).
  absl::StatusOr<RequestId> PostRecv(int self, int peer, uint64_t tag, size_t capacity = SIZE_MAX);
  absl::Status Wait(int self, RequestId id, Deadline deadline, Bytes* out);
  absl::StatusOr<bool> Test(int self, RequestId id, Bytes* out);
  void CancelAll(int self);
  // Marks `rank` dead: its pending and future operations fail, and peers
  // waiting on it get UNAVAILABLE at once.
  void Kill(int rank);
  PeerCounters Counters(int self, int peer) const;
  void ResetCounters(int self);

  // Runs `fn(policy)` under the fabric's lock (null policy: not called).
  // Returns false when there is no policy.
  template <typename Fn>
  bool WithPolicy(Fn fn) {
    std::lock_guard<std::mutex> lock(mu_);
    if (policy_ == nullptr) return false;
    fn(*policy_);
    return true;
  }

 private:
  struct Message {
    Bytes data;
    double stamp = 0;  // the policy's delivery time (0 without a policy)
  };
  struct Recv {
    int peer = 0;
    uint64_t tag = 0;
    size_t capacity = SIZE_MAX;
    bool done = false;
    Message msg;
  };
  // Messages and receives of one (src, dst, tag) triple. At most one of the
  // two queues is non-empty: a send first satisfies the oldest waiting receive.
  struct Channel {
    std::deque<Message> unmatched;
    std::deque<std::shared_ptr<Recv>> waiting;
  };
  struct RankState {
    bool dead = false;
    // Signalled when a message is delivered to this rank or any rank dies.
    std::condition_variable cv;
    std::map<RequestId, std::shared_ptr<Recv>> recvs;
    // Sends complete at post time (the fabric owns the bytes); their ids
    // (and stamps) are kept only so that Wait/Test on them succeed once.
    std::map<RequestId, double> sends;
    RequestId next_id = 1;
    std::vector<PeerCounters> counters;
  };

  absl::Status CheckArgs(int self, int peer, uint64_t tag) const;
  absl::StatusOr<bool> CompleteSendLocked(int self, RequestId id);
  absl::StatusOr<bool> CompleteRecvLocked(int self, RequestId id, Recv& r, Bytes* out);
  void RemoveWaitingLocked(int self, const Recv& r);

  const int size_;
  const std::unique_ptr<DeliveryPolicy> policy_;
  mutable std::mutex mu_;
  std::vector<RankState> ranks_;
  std::map<std::tuple<int, int, uint64_t>, Channel> channels_;
};

// One rank's view of a fabric; Abort kills the rank (a dead rank is exactly
// an aborted one: peers waiting on it fail at once).
class LoopbackTransport : public Transport {
 public:
  LoopbackTransport(std::shared_ptr<LoopbackFabric> fabric, int rank)
      : fabric_(std::move(fabric)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return fabric_->size(); }
  absl::StatusOr<RequestId> PostSend(int peer, uint64_t tag, Bytes payload) override {
    return fabric_->PostSend(rank_, peer, tag, std::move(payload));
  }
  absl::StatusOr<RequestId> PostRecv(int peer, uint64_t tag) override {
    return fabric_->PostRecv(rank_, peer, tag);
  }
  absl::StatusOr<RequestId> PostRecvAtMost(int peer, uint64_t tag, size_t capacity) override {
    return fabric_->PostRecv(rank_, peer, tag, capacity);
  }
  absl::Status Wait(RequestId request, Deadline deadline, Bytes* out) override {
    return fabric_->Wait(rank_, request, deadline, out);
  }
  absl::StatusOr<bool> Test(RequestId request, Bytes* out) override {
    return fabric_->Test(rank_, request, out);
  }
  // Never blocks: fabric requests reference no caller memory.
  void CancelAll(Deadline) override { fabric_->CancelAll(rank_); }
  void Abort(Deadline) override {
    fabric_->CancelAll(rank_);
    fabric_->Kill(rank_);
    aborted_ = true;
  }
  bool aborted() const override { return aborted_; }
  PeerCounters counters(int peer) const override { return fabric_->Counters(rank_, peer); }
  void ResetCounters() override { fabric_->ResetCounters(rank_); }

  LoopbackFabric& fabric() const { return *fabric_; }

 private:
  std::shared_ptr<LoopbackFabric> fabric_;
  const int rank_;
  bool aborted_ = false;
};

// A fabric of `size` ranks under `policy` (may be null), one Transport a rank.
std::vector<std::unique_ptr<Transport>> CreateFabricTransports(
    int size, std::unique_ptr<DeliveryPolicy> policy);

// The fabric of `t`; null when `t` is no LoopbackTransport.
LoopbackFabric* FabricOf(const Transport& t);

}  // namespace gradex::transport

#endif  // GRADEX_TRANSPORT_LOOPBACK_FABRIC_H_
