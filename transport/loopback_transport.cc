#include "transport/loopback_transport.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "transport/loopback_fabric.h"

namespace gradex::transport {

LoopbackFabric::LoopbackFabric(int size, std::unique_ptr<DeliveryPolicy> policy)
    : size_(size), policy_(std::move(policy)), ranks_(size) {
  for (RankState& r : ranks_) r.counters.resize(size);
}

absl::Status LoopbackFabric::CheckArgs(int self, int peer, uint64_t tag) const {
  if (peer < 0 || peer >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", self, ": peer ", peer, " out of range [0, ", size_, ")"));
  }
  if (tag > kMaxTag) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", self, ": tag ", tag, " exceeds kMaxTag ", kMaxTag));
  }
  return absl::OkStatus();
}

absl::StatusOr<RequestId> LoopbackFabric::PostSend(int self, int peer, uint64_t tag,
                                                   Bytes payload) {
  if (absl::Status s = CheckArgs(self, peer, tag); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  RankState& me = ranks_[self];
  if (me.dead) return absl::UnavailableError(absl::StrCat("rank ", self, " is dead"));
  if (ranks_[peer].dead) {
    return absl::UnavailableError(absl::StrCat("rank ", self, ": peer ", peer, " is dead"));
  }
  me.counters[peer].sent_bytes += payload.size();
  me.counters[peer].sent_messages += 1;
  Message msg{std::move(payload), 0};
  if (policy_ != nullptr) msg.stamp = policy_->Posted(self, peer, msg.data.size());
  const RequestId id = me.next_id++;
  me.sends.emplace(id, msg.stamp);
  Channel& ch = channels_[{self, peer, tag}];
  if (!ch.waiting.empty()) {
    std::shared_ptr<Recv> r = std::move(ch.waiting.front());
    ch.waiting.pop_front();
    r->msg = std::move(msg);
    r->done = true;
    ranks_[peer].cv.notify_all();
  } else {
    ch.unmatched.push_back(std::move(msg));
  }
  return id;
}

absl::StatusOr<RequestId> LoopbackFabric::PostRecv(int self, int peer, uint64_t tag,
                                                   size_t capacity) {
  if (absl::Status s = CheckArgs(self, peer, tag); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  RankState& me = ranks_[self];
  if (me.dead) return absl::UnavailableError(absl::StrCat("rank ", self, " is dead"));
  auto r = std::make_shared<Recv>();
  r->peer = peer;
  r->tag = tag;
  r->capacity = capacity;
  Channel& ch = channels_[{peer, self, tag}];
  if (!ch.unmatched.empty()) {
    // Messages sent before the peer died are still delivered.
    r->msg = std::move(ch.unmatched.front());
    ch.unmatched.pop_front();
    r->done = true;
  } else {
    ch.waiting.push_back(r);
  }
  const RequestId id = me.next_id++;
  me.recvs.emplace(id, std::move(r));
  return id;
}

absl::Status LoopbackFabric::Wait(int self, RequestId id, Deadline deadline, Bytes* out) {
  std::unique_lock<std::mutex> lock(mu_);
  RankState& me = ranks_[self];
  if (me.sends.count(id) != 0) return CompleteSendLocked(self, id).status();
  auto it = me.recvs.find(id);
  if (it == me.recvs.end()) {
    return absl::NotFoundError(absl::StrCat("rank ", self, ": unknown request ", id));
  }
  std::shared_ptr<Recv> r = it->second;
  for (;;) {
    if (absl::StatusOr<bool> done = CompleteRecvLocked(self, id, *r, out); !done.ok() || *done) {
      return done.status();
    }
    if (me.cv.wait_until(lock, deadline) == std::cv_status::timeout && Clock::now() >= deadline) {
      if (absl::StatusOr<bool> done = CompleteRecvLocked(self, id, *r, out); !done.ok() || *done) {
        return done.status();
      }
      // The request stays posted: the caller may Wait again or CancelAll.
      return absl::DeadlineExceededError(absl::StrCat("rank ", self, ": receive from peer ",
                                                      r->peer, " tag ", r->tag, " timed out"));
    }
  }
}

absl::StatusOr<bool> LoopbackFabric::Test(int self, RequestId id, Bytes* out) {
  std::lock_guard<std::mutex> lock(mu_);
  RankState& me = ranks_[self];
  if (me.sends.count(id) != 0) return CompleteSendLocked(self, id);
  auto it = me.recvs.find(id);
  if (it == me.recvs.end()) {
    return absl::NotFoundError(absl::StrCat("rank ", self, ": unknown request ", id));
  }
  std::shared_ptr<Recv> r = it->second;
  return CompleteRecvLocked(self, id, *r, out);
}

void LoopbackFabric::CancelAll(int self) {
  std::lock_guard<std::mutex> lock(mu_);
  RankState& me = ranks_[self];
  for (auto& [id, r] : me.recvs) {
    if (!r->done) RemoveWaitingLocked(self, *r);
  }
  me.recvs.clear();
  me.sends.clear();
}

void LoopbackFabric::Kill(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (rank < 0 || rank >= size_) return;
  ranks_[rank].dead = true;
  for (RankState& r : ranks_) r.cv.notify_all();
}

PeerCounters LoopbackFabric::Counters(int self, int peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (peer < 0 || peer >= size_) return {};
  return ranks_[self].counters[peer];
}

void LoopbackFabric::ResetCounters(int self) {
  std::lock_guard<std::mutex> lock(mu_);
  for (PeerCounters& c : ranks_[self].counters) c = PeerCounters{};
}

// A send is over once posted (the fabric holds the bytes); the policy learns
// when it ended in its time. Requires mu_ held.
absl::StatusOr<bool> LoopbackFabric::CompleteSendLocked(int self, RequestId id) {
  RankState& me = ranks_[self];
  auto it = me.sends.find(id);
  const double stamp = it->second;
  me.sends.erase(it);
  if (me.dead) return absl::UnavailableError(absl::StrCat("rank ", self, " is dead"));
  if (policy_ != nullptr) policy_->SendCompleted(self, stamp);
  return true;
}

// Returns true (releasing the id) when the receive is over, an error when
// it can never complete, false while still pending. Requires mu_ held.
absl::StatusOr<bool> LoopbackFabric::CompleteRecvLocked(int self, RequestId id, Recv& r,
                                                        Bytes* out) {
  RankState& me = ranks_[self];
  if (me.dead) {
    me.recvs.erase(id);
    return absl::UnavailableError(absl::StrCat("rank ", self, " is dead"));
  }
  if (r.done && r.msg.data.size() > r.capacity) {
    // The message is discarded: what the peer sent is not what was posted.
    ++me.counters[r.peer].refused_messages;
    absl::Status s = absl::ResourceExhaustedError(absl::StrCat(
        "rank ", self, ": receive from peer ", r.peer, " tag ", r.tag, ": peer ", r.peer, " sent ",
        r.msg.data.size(), " bytes, over the ", r.capacity, " the receive was posted for"));
    me.recvs.erase(id);
    return s;
  }
  if (r.done) {
    const size_t bytes = r.msg.data.size();
    me.counters[r.peer].recv_bytes += bytes;
    me.counters[r.peer].recv_messages += 1;
    if (policy_ != nullptr) policy_->Received(self, r.msg.stamp, bytes);
    if (out != nullptr) *out = std::move(r.msg.data);
    me.recvs.erase(id);
    return true;
  }
  if (ranks_[r.peer].dead) {
    absl::Status s =
        absl::UnavailableError(absl::StrCat("rank ", self, ": receive from peer ", r.peer, " tag ",
                                            r.tag, ": peer ", r.peer, " is dead"));
    RemoveWaitingLocked(self, r);
    me.recvs.erase(id);
    return s;
  }
  return false;
}

void LoopbackFabric::RemoveWaitingLocked(int self, const Recv& r) {
  auto cit = channels_.find({r.peer, self, r.tag});
  if (cit == channels_.end()) return;
  auto& w = cit->second.waiting;
  for (auto wit = w.begin(); wit != w.end(); ++wit) {
    if (wit->get() == &r) {
      w.erase(wit);
      return;
    }
  }
}

std::vector<std::unique_ptr<Transport>> CreateFabricTransports(
    int size, std::unique_ptr<DeliveryPolicy> policy) {
  std::vector<std::unique_ptr<Transport>> out;
  if (size <= 0) return out;
  auto fabric = std::make_shared<LoopbackFabric>(size, std::move(policy));
  for (int r = 0; r < size; ++r) out.push_back(std::make_unique<LoopbackTransport>(fabric, r));
  return out;
}

LoopbackFabric* FabricOf(const Transport& t) {
  const auto* l = dynamic_cast<const LoopbackTransport*>(&t);
  return l == nullptr ? nullptr : &l->fabric();
}

std::vector<std::unique_ptr<Transport>> CreateLoopbackTransports(int size) {
  return CreateFabricTransports(size, nullptr);
}

void KillLoopbackRank(Transport& any_rank_of_fabric, int rank) {
  if (LoopbackFabric* f = FabricOf(any_rank_of_fabric)) f->Kill(rank);
}

}  // namespace gradex::transport
