#include "transport/sim_transport.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gradex {
namespace {

struct Message {
  Bytes data;
  double arrival = 0;  // virtual time the last byte reaches the receiver
};

struct Recv {
  int peer = 0;
  uint64_t tag = 0;
  bool done = false;
  Message msg;
};

// Messages and receives of one (src, dst, tag) triple; at most one queue is
// non-empty, and both are FIFO (posting order matching).
struct Channel {
  std::deque<Message> unmatched;
  std::deque<std::shared_ptr<Recv>> waiting;
};

struct RankState {
  bool dead = false;
  std::condition_variable cv;  // a delivery to this rank, or any death
  std::map<RequestId, std::shared_ptr<Recv>> recvs;
  std::map<RequestId, double> sends;  // id -> virtual time the send completes
  RequestId next_id = 1;
  std::vector<PeerCounters> counters;
  double now = 0;        // the rank's virtual clock
  double link_free = 0;  // when its outgoing link has sent everything posted
};

}  // namespace

class SimWorld {
 public:
  SimWorld(int size, const SimParams& params) : size_(size), params_(params), ranks_(size) {
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

  absl::StatusOr<RequestId> PostSend(int self, int peer, uint64_t tag, Bytes payload) {
    if (absl::Status s = CheckArgs(self, peer, tag); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    RankState& me = ranks_[self];
    if (me.dead) return absl::UnavailableError(absl::StrCat("rank ", self, " is dead"));
    if (ranks_[peer].dead) {
      return absl::UnavailableError(absl::StrCat("rank ", self, ": peer ", peer, " is dead"));
    }
    me.counters[peer].sent_bytes += payload.size();
    me.counters[peer].sent_messages += 1;
    Message msg{std::move(payload), me.now};
    if (peer != self) {
      const double start = std::max(me.now, me.link_free);
      me.link_free = start + params_.alpha_s + params_.beta_s_per_byte * msg.data.size();
      msg.arrival = me.link_free;
    }
    const RequestId id = me.next_id++;
    me.sends.emplace(id, msg.arrival);
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
      r->msg = std::move(ch.unmatched.front());  // sent before a death: still delivered
      ch.unmatched.pop_front();
      r->done = true;
    } else {
      ch.waiting.push_back(r);
    }
    const RequestId id = me.next_id++;
    me.recvs.emplace(id, std::move(r));
    return id;
  }

  absl::Status Wait(int self, RequestId id, Deadline deadline, Bytes* out) {
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
        if (absl::StatusOr<bool> done = CompleteRecvLocked(self, id, *r, out);
            !done.ok() || *done) {
          return done.status();
        }
        return absl::DeadlineExceededError(absl::StrCat("rank ", self, ": receive from peer ",
                                                        r->peer, " tag ", r->tag, " timed out"));
      }
    }
  }

  absl::StatusOr<bool> Test(int self, RequestId id, Bytes* out) {
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

  void CancelAll(int self) {
    std::lock_guard<std::mutex> lock(mu_);
    RankState& me = ranks_[self];
    for (auto& [id, r] : me.recvs) {
      if (!r->done) RemoveWaitingLocked(self, *r);
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

  double Now(int self) const {
    std::lock_guard<std::mutex> lock(mu_);
    return ranks_[self].now;
  }

  void ResetClock(int self, double now) {
    std::lock_guard<std::mutex> lock(mu_);
    ranks_[self].now = now;
    ranks_[self].link_free = now;
  }

 private:
  // A send is complete (in virtual time) once its transmission ends; the
  // sender's clock moves there. Requires mu_ held.
  absl::StatusOr<bool> CompleteSendLocked(int self, RequestId id) {
    RankState& me = ranks_[self];
    auto it = me.sends.find(id);
    const double done_at = it->second;
    me.sends.erase(it);
    if (me.dead) return absl::UnavailableError(absl::StrCat("rank ", self, " is dead"));
    me.now = std::max(me.now, done_at);
    return true;
  }

  // True (releasing the id, advancing the clock) when the receive is over, an
  // error when it can never complete, false while pending. Requires mu_ held.
  absl::StatusOr<bool> CompleteRecvLocked(int self, RequestId id, Recv& r, Bytes* out) {
    RankState& me = ranks_[self];
    if (me.dead) {
      me.recvs.erase(id);
      return absl::UnavailableError(absl::StrCat("rank ", self, " is dead"));
    }
    if (r.done) {
      const size_t bytes = r.msg.data.size();
      me.counters[r.peer].recv_bytes += bytes;
      me.counters[r.peer].recv_messages += 1;
      me.now = std::max(me.now, r.msg.arrival) + params_.gamma_s_per_word * (bytes / 4);
      if (out != nullptr) *out = std::move(r.msg.data);
      me.recvs.erase(id);
      return true;
    }
    if (ranks_[r.peer].dead) {
      absl::Status s =
          absl::UnavailableError(absl::StrCat("rank ", self, ": receive from peer ", r.peer,
                                              " tag ", r.tag, ": peer ", r.peer, " is dead"));
      RemoveWaitingLocked(self, r);
      me.recvs.erase(id);
      return s;
    }
    return false;
  }

  void RemoveWaitingLocked(int self, const Recv& r) {
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

  const int size_;
  const SimParams params_;
  mutable std::mutex mu_;
  std::vector<RankState> ranks_;
  std::map<std::tuple<int, int, uint64_t>, Channel> channels_;
};

namespace {

class SimTransport : public Transport {
 public:
  SimTransport(std::shared_ptr<SimWorld> world, int rank) : world_(std::move(world)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return world_->size(); }
  absl::StatusOr<RequestId> PostSend(int peer, uint64_t tag, Bytes payload) override {
    return world_->PostSend(rank_, peer, tag, std::move(payload));
  }
  absl::StatusOr<RequestId> PostRecv(int peer, uint64_t tag) override {
    return world_->PostRecv(rank_, peer, tag);
  }
  absl::Status Wait(RequestId request, Deadline deadline, Bytes* out) override {
    return world_->Wait(rank_, request, deadline, out);
  }
  absl::StatusOr<bool> Test(RequestId request, Bytes* out) override {
    return world_->Test(rank_, request, out);
  }
  void CancelAll(Deadline) override { world_->CancelAll(rank_); }
  void Abort(Deadline) override {
    world_->CancelAll(rank_);
    world_->Kill(rank_);
    aborted_ = true;
  }
  bool aborted() const override { return aborted_; }
  PeerCounters counters(int peer) const override { return world_->Counters(rank_, peer); }
  void ResetCounters() override { world_->ResetCounters(rank_); }

  SimWorld& world() const { return *world_; }

 private:
  std::shared_ptr<SimWorld> world_;
  const int rank_;
  bool aborted_ = false;
};

}  // namespace

std::vector<std::unique_ptr<Transport>> CreateSimTransports(int size, const SimParams& params) {
  std::vector<std::unique_ptr<Transport>> out;
  if (size <= 0) return out;
  auto world = std::make_shared<SimWorld>(size, params);
  for (int r = 0; r < size; ++r) out.push_back(std::make_unique<SimTransport>(world, r));
  return out;
}

double SimNow(const Transport& t) {
  const auto* s = dynamic_cast<const SimTransport*>(&t);
  return s == nullptr ? -1 : s->world().Now(s->rank());
}

bool SimResetClock(Transport& t, double now) {
  auto* s = dynamic_cast<SimTransport*>(&t);
  if (s == nullptr) return false;
  s->world().ResetClock(s->rank(), now);
  return true;
}

void KillSimRank(Transport& any_rank_of_world, int rank) {
  if (auto* s = dynamic_cast<SimTransport*>(&any_rank_of_world)) s->world().Kill(rank);
}

}  // namespace gradex
