#include "transport/loopback_transport.h"

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gradex {

namespace {

struct Recv {
  int peer = 0;
  uint64_t tag = 0;
  bool done = false;
  Bytes data;
};

// Messages and receives of one (src, dst, tag) triple. At most one of the two
// queues is non-empty: a send first satisfies the oldest waiting receive.
struct Channel {
  std::deque<Bytes> unmatched;
  std::deque<std::shared_ptr<Recv>> waiting;
};

struct RankState {
  bool dead = false;
  // Signalled when a message is delivered to this rank or any rank dies.
  std::condition_variable cv;
  std::map<RequestId, std::shared_ptr<Recv>> recvs;
  // Sends complete at post time (the fabric owns the bytes); their ids are
  // remembered only so that Wait/Test on them succeed once.
  std::map<RequestId, int> sends;
  RequestId next_id = 1;
  std::vector<PeerCounters> counters;
};

}  // namespace

class LoopbackFabric {
 public:
  explicit LoopbackFabric(int size) : size_(size), ranks_(size) {
    for (RankState& r : ranks_) r.counters.resize(size);
  }

  int size() const { return size_; }

  absl::Status CheckArgs(int self, int peer, uint64_t tag) const {
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

  // Requires mu_ held.
  absl::Status Alive(int self, int peer) const {
    if (ranks_[self].dead) return absl::UnavailableError(absl::StrCat("rank ", self, " is dead"));
    if (ranks_[peer].dead) {
      return absl::UnavailableError(absl::StrCat("rank ", self, ": peer ", peer, " is dead"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<RequestId> PostSend(int self, int peer, uint64_t tag, Bytes payload) {
    if (absl::Status s = CheckArgs(self, peer, tag); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    if (absl::Status s = Alive(self, peer); !s.ok()) return s;
    RankState& me = ranks_[self];
    me.counters[peer].sent_bytes += payload.size();
    me.counters[peer].sent_messages += 1;
    Channel& ch = channels_[{self, peer, tag}];
    if (!ch.waiting.empty()) {
      std::shared_ptr<Recv> r = std::move(ch.waiting.front());
      ch.waiting.pop_front();
      r->data = std::move(payload);
      r->done = true;
      ranks_[peer].cv.notify_all();
    } else {
      ch.unmatched.push_back(std::move(payload));
    }
    RequestId id = me.next_id++;
    me.sends.emplace(id, peer);
    return id;
  }

  absl::StatusOr<RequestId> PostRecv(int self, int peer, uint64_t tag) {
    if (absl::Status s = CheckArgs(self, peer, tag); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    RankState& me = ranks_[self];
    if (me.dead) return absl::UnavailableError(absl::StrCat("rank ", self, " is dead"));
    auto r = std::make_shared<Recv>();
    r->peer = peer;
    r->tag = tag;
    Channel& ch = channels_[{peer, self, tag}];
    if (!ch.unmatched.empty()) {
      // Messages sent before the peer died are still delivered.
      r->data = std::move(ch.unmatched.front());
      ch.unmatched.pop_front();
      r->done = true;
    } else {
      ch.waiting.push_back(r);
    }
    RequestId id = me.next_id++;
    me.recvs.emplace(id, std::move(r));
    return id;
  }

  absl::Status Wait(int self, RequestId id, Deadline deadline, Bytes* out) {
    std::unique_lock<std::mutex> lock(mu_);
    RankState& me = ranks_[self];
    if (auto it = me.sends.find(id); it != me.sends.end()) {
      me.sends.erase(it);
      return me.dead ? absl::UnavailableError(absl::StrCat("rank ", self, " is dead"))
                     : absl::OkStatus();
    }
    auto it = me.recvs.find(id);
    if (it == me.recvs.end()) {
      return absl::NotFoundError(absl::StrCat("rank ", self, ": unknown request ", id));
    }
    std::shared_ptr<Recv> r = it->second;
    for (;;) {
      if (absl::StatusOr<bool> done = CompleteLocked(self, id, *r, out); !done.ok() || *done) {
        return done.status();
      }
      if (me.cv.wait_until(lock, deadline) == std::cv_status::timeout && Clock::now() >= deadline) {
        if (absl::StatusOr<bool> done = CompleteLocked(self, id, *r, out); !done.ok() || *done) {
          return done.status();
        }
        // The request stays posted: the caller may Wait again or CancelAll.
        return absl::DeadlineExceededError(absl::StrCat("rank ", self, ": receive from peer ",
                                                        r->peer, " tag ", r->tag, " timed out"));
      }
    }
  }

  absl::StatusOr<bool> Test(int self, RequestId id, Bytes* out) {
    std::lock_guard<std::mutex> lock(mu_);
    RankState& me = ranks_[self];
    if (auto it = me.sends.find(id); it != me.sends.end()) {
      me.sends.erase(it);
      if (me.dead) return absl::UnavailableError(absl::StrCat("rank ", self, " is dead"));
      return true;
    }
    auto it = me.recvs.find(id);
    if (it == me.recvs.end()) {
      return absl::NotFoundError(absl::StrCat("rank ", self, ": unknown request ", id));
    }
    std::shared_ptr<Recv> r = it->second;
    return CompleteLocked(self, id, *r, out);
  }

  void CancelAll(int self) {
    std::lock_guard<std::mutex> lock(mu_);
    RankState& me = ranks_[self];
    for (auto& [id, r] : me.recvs) {
      if (r->done) continue;
      auto cit = channels_.find({r->peer, self, r->tag});
      if (cit == channels_.end()) continue;
      auto& w = cit->second.waiting;
      for (auto wit = w.begin(); wit != w.end(); ++wit) {
        if (*wit == r) {
          w.erase(wit);
          break;
        }
      }
    }
    me.recvs.clear();
    me.sends.clear();
  }

  void Kill(int rank) {
    std::lock_guard<std::mutex> lock(mu_);
    if (rank < 0 || rank >= size_) return;
    ranks_[rank].dead = true;
    for (RankState& r : ranks_) r.cv.notify_all();
  }

  PeerCounters Counters(int self, int peer) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (peer < 0 || peer >= size_) return {};
    return ranks_[self].counters[peer];
  }

  void ResetCounters(int self) {
    std::lock_guard<std::mutex> lock(mu_);
    for (PeerCounters& c : ranks_[self].counters) c = PeerCounters{};
  }

 private:
  // Returns true (releasing the id) when the receive is over, an error when
  // it can never complete, false while still pending. Requires mu_ held.
  absl::StatusOr<bool> CompleteLocked(int self, RequestId id, Recv& r, Bytes* out) {
    RankState& me = ranks_[self];
    if (me.dead) {
      me.recvs.erase(id);
      return absl::UnavailableError(absl::StrCat("rank ", self, " is dead"));
    }
    if (r.done) {
      me.counters[r.peer].recv_bytes += r.data.size();
      me.counters[r.peer].recv_messages += 1;
      if (out != nullptr) *out = std::move(r.data);
      me.recvs.erase(id);
      return true;
    }
    if (ranks_[r.peer].dead) {
      absl::Status s =
          absl::UnavailableError(absl::StrCat("rank ", self, ": receive from peer ", r.peer,
                                              " tag ", r.tag, ": peer ", r.peer, " is dead"));
      auto cit = channels_.find({r.peer, self, r.tag});
      if (cit != channels_.end()) {
        auto& w = cit->second.waiting;
        for (auto wit = w.begin(); wit != w.end(); ++wit) {
          if (wit->get() == &r) {
            w.erase(wit);
            break;
          }
        }
      }
      me.recvs.erase(id);
      return s;
    }
    return false;
  }

  const int size_;
  mutable std::mutex mu_;
  std::vector<RankState> ranks_;
  std::map<std::tuple<int, int, uint64_t>, Channel> channels_;
};

namespace {

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
  absl::Status Wait(RequestId request, Deadline deadline, Bytes* out) override {
    return fabric_->Wait(rank_, request, deadline, out);
  }
  absl::StatusOr<bool> Test(RequestId request, Bytes* out) override {
    return fabric_->Test(rank_, request, out);
  }
  // Never blocks: loopback requests reference no caller memory.
  void CancelAll(Deadline) override { fabric_->CancelAll(rank_); }
  // A dead rank is exactly an aborted one: peers waiting on it fail at once.
  void Abort(Deadline) override {
    fabric_->CancelAll(rank_);
    fabric_->Kill(rank_);
    aborted_ = true;
  }
  bool aborted() const override { return aborted_; }
  PeerCounters counters(int peer) const override { return fabric_->Counters(rank_, peer); }
  void ResetCounters() override { fabric_->ResetCounters(rank_); }

  LoopbackFabric& fabric() { return *fabric_; }

 private:
  std::shared_ptr<LoopbackFabric> fabric_;
  const int rank_;
  bool aborted_ = false;
};

}  // namespace

std::vector<std::unique_ptr<Transport>> CreateLoopbackTransports(int size) {
  std::vector<std::unique_ptr<Transport>> out;
  if (size <= 0) return out;
  auto fabric = std::make_shared<LoopbackFabric>(size);
  for (int r = 0; r < size; ++r) out.push_back(std::make_unique<LoopbackTransport>(fabric, r));
  return out;
}

void KillLoopbackRank(Transport& any_rank_of_fabric, int rank) {
  if (auto* t = dynamic_cast<LoopbackTransport*>(&any_rank_of_fabric)) t->fabric().Kill(rank);
}

}  // namespace gradex
