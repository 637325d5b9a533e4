// UcxTransport: request bookkeeping (post, match, progress, wait, test,
// cancel) and the UCX completion callbacks.
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "transport/ucx_internal.h"

namespace gradex {
namespace ucx_internal {

void SendCallback(void* /*request*/, ucs_status_t status, void* user_data) {
  static_cast<Request*>(user_data)->Finish(status);
}

void RecvCallback(void* /*request*/, ucs_status_t status, const ucp_tag_recv_info_t* info,
                  void* user_data) {
  auto* r = static_cast<Request*>(user_data);
  r->landed_at = Clock::now();
  r->landed_length = info != nullptr ? info->length : 0;
  r->Finish(status);
}

absl::Status UcxTransport::CheckArgs(int peer, uint64_t tag) const {
  if (peer < 0 || peer >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank_, ": peer ", peer, " out of range [0, ", size_, ")"));
  }
  if (tag > kMaxTag) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank_, ": tag ", tag, " exceeds kMaxTag ", kMaxTag));
  }
  return absl::OkStatus();
}

absl::StatusOr<RequestId> UcxTransport::PostSend(int peer, uint64_t tag, Bytes payload) {
  if (absl::Status s = CheckArgs(peer, tag); !s.ok()) return s;
  if (aborted_) return absl::FailedPreconditionError(absl::StrCat("rank ", rank_, " aborted"));
  const size_t n = payload.size();
  absl::StatusOr<RequestId> id = StartSend(peer, tag, /*internal=*/false, std::move(payload));
  if (id.ok()) {
    counters_[peer].sent_bytes += n;
    counters_[peer].sent_messages += 1;
  }
  return id;
}

absl::StatusOr<RequestId> UcxTransport::PostRecv(int peer, uint64_t tag) {
  if (absl::Status s = CheckArgs(peer, tag); !s.ok()) return s;
  if (aborted_) return absl::FailedPreconditionError(absl::StrCat("rank ", rank_, " aborted"));
  return StartRecv(peer, tag, /*internal=*/false);
}

absl::StatusOr<RequestId> UcxTransport::PostRecvAtMost(int peer, uint64_t tag, size_t capacity) {
  if (absl::Status s = CheckArgs(peer, tag); !s.ok()) return s;
  if (aborted_) return absl::FailedPreconditionError(absl::StrCat("rank ", rank_, " aborted"));
  return StartRecv(peer, tag, /*internal=*/false, capacity);
}

absl::StatusOr<RequestId> UcxTransport::StartSend(int peer, uint64_t tag, bool internal,
                                                  Bytes payload) {
  auto r = std::make_unique<Request>();
  r->is_send = true;
  r->internal = internal;
  r->peer = peer;
  r->tag = tag;
  r->wire_tag = WireTag(generation_, rank_, tag, internal);
  if (peer == rank_) {
    self_unmatched_[r->wire_tag].push_back(std::move(payload));
    r->state = State::kDone;
  } else {
    if (!peer_status_[peer].ok()) return peer_status_[peer];
    r->buf = std::move(payload);
    r->state = State::kInFlight;
    ucp_request_param_t param = {};
    param.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
    param.cb.send = &SendCallback;
    param.user_data = r.get();
    param.datatype = ucp_dt_make_contig(1);
    ucs_status_ptr_t p =
        ucp_tag_send_nbx(eps_[peer], r->buf.data(), r->buf.size(), r->wire_tag, &param);
    if (UCS_PTR_IS_ERR(p)) {
      return absl::UnavailableError(absl::StrCat("rank ", rank_, ": send to peer ", peer, " tag ",
                                                 tag, ": ", ucs_status_string(UCS_PTR_STATUS(p))));
    }
    if (p == nullptr) {
      r->state = State::kDone;
    } else {
      r->ucx = p;
    }
  }
  RequestId id = next_id_++;
  requests_.emplace(id, std::move(r));
  return id;
}

RequestId UcxTransport::StartRecv(int peer, uint64_t tag, bool internal, size_t capacity) {
  auto r = std::make_unique<Request>();
  r->internal = internal;
  r->capacity = capacity;
  r->peer = peer;
  r->tag = tag;
  r->wire_tag = WireTag(generation_, peer, tag, internal);
  r->state = State::kQueued;
  r->posted_at = Clock::now();
  Request* raw = r.get();
  RequestId id = next_id_++;
  requests_.emplace(id, std::move(r));
  // A receive whose size the schedule bounds is posted to UCX with its buffer
  // (the message lands where the caller gets it, and UCX starts a rendezvous
  // as soon as the sender's request arrives), when a kept buffer holds the
  // bound: a fresh one would be allocated and zeroed at the bound, not at the
  // size that comes (a sparse frame is often far below its bound). And only
  // when no probed receive on the same tag is queued before it: UCX matches
  // posted receives ahead of our probes, which would reorder a (sender, tag)
  // pair's messages; nor when an early message of the tag is held (it is
  // older than anything UCX still has).
  const size_t cap = Cap(capacity);
  if (peer != rank_ && capacity != SIZE_MAX && options_.direct_receive_bytes > 0 &&
      cap >= options_.direct_receive_bytes && pool_.Has(cap) && !queued_.contains(raw->wire_tag) &&
      !early_.contains(raw->wire_tag)) {
    PostDirect(raw, cap);
    return id;
  }
  queued_[raw->wire_tag].push_back(raw);
  // Match right away if the message is already here (cheap: a probe).
  MatchQueued();
  return id;
}

void UcxTransport::PostDirect(Request* r, size_t cap) {
  r->direct = true;
  if (!r->internal) profile_.posted_direct += 1;
  r->capacity = cap;
  r->matched_at = r->posted_at;
  TakeFromPool(r, cap);
  r->state = State::kInFlight;
  ucp_request_param_t param = {};
  // No immediate completion: a receive of a message already here still gets
  // a request and the callback, which reports the message's length (UCX 1.13
  // leaves recv_info unfilled when it completes a tag receive at once).
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.recv = &RecvCallback;
  param.user_data = r;
  param.datatype = ucp_dt_make_contig(1);
  ucs_status_ptr_t p =
      ucp_tag_recv_nbx(worker_, r->buf.data(), r->buf.size(), r->wire_tag, kFullMask, &param);
  if (UCS_PTR_IS_PTR(p)) {
    r->ucx = p;  // the callback has run, or will
  } else {
    r->landed_at = Clock::now();
    r->Finish(p == nullptr ? UCS_ERR_NO_MESSAGE : UCS_PTR_STATUS(p));
  }
}

size_t UcxTransport::Cap(size_t capacity) const {
  return options_.max_message_bytes > 0 ? std::min(options_.max_message_bytes, capacity) : capacity;
}

void UcxTransport::TakeFromPool(Request* r, size_t bytes) {
  const Clock::time_point start = Clock::now();
  const uint64_t reused = pool_.reused();
  r->buf = pool_.Take(bytes);
  r->pooled = pool_.reused() != reused;
  r->alloc_s = std::chrono::duration<double>(Clock::now() - start).count();
}

void UcxTransport::SettleDirect(Request* r) {
  r->settled = true;
  if (r->ucx_status == UCS_ERR_MESSAGE_TRUNCATED) {
    // Longer than the schedule allows: refused as at the probe (the buffer
    // was the cap, never the size the peer announced). UCX reports the
    // sender's length when it knows it; at least one byte over the cap
    // otherwise.
    r->refused_bytes = std::max(r->landed_length, r->capacity + 1);
    r->refused_cap = r->capacity;
    if (r->peer >= 0 && r->peer < size_) ++counters_[r->peer].refused_messages;
    Bytes().swap(r->buf);
    r->ucx_status = UCS_OK;
    r->state = State::kDone;
    return;
  }
  if (r->state == State::kDone) r->buf.resize(std::min(r->landed_length, r->buf.size()));
}

void UcxTransport::ReceiveProbed(Request* r, ucp_tag_message_h msg,
                                 const ucp_tag_recv_info_t& info) {
  // The probe told the length the peer announced; the receive takes at most
  // what it was posted for and the process-wide cap, whichever is smaller.
  const size_t cap = Cap(r->capacity);
  const bool refused = info.length > cap;
  if (refused) {
    r->refused_bytes = info.length;
    r->refused_cap = cap;
    if (r->peer >= 0 && r->peer < size_) ++counters_[r->peer].refused_messages;
  }
  r->matched_at = Clock::now();
  if (refused) {
    r->buf.resize(1);
  } else {
    TakeFromPool(r, info.length);
  }
  r->state = State::kInFlight;
  ucp_request_param_t param = {};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
  param.cb.recv = &RecvCallback;
  param.user_data = r;
  param.datatype = ucp_dt_make_contig(1);
  ucs_status_ptr_t p = ucp_tag_msg_recv_nbx(worker_, r->buf.data(), r->buf.size(), msg, &param);
  if (UCS_PTR_IS_ERR(p)) {
    r->landed_at = Clock::now();
    r->Finish(UCS_PTR_STATUS(p));
  } else if (p == nullptr) {
    r->landed_at = Clock::now();
    r->Finish(UCS_OK);
  } else {
    r->ucx = p;
  }
}

void UcxTransport::MatchQueued() {
  for (auto it = queued_.begin(); it != queued_.end();) {
    std::deque<Request*>& q = it->second;
    while (!q.empty()) {
      Request* r = q.front();
      if (r->peer == rank_) {
        auto self = self_unmatched_.find(r->wire_tag);
        if (self == self_unmatched_.end()) break;
        r->buf = std::move(self->second.front());
        r->matched_at = r->landed_at = Clock::now();
        self->second.pop_front();
        if (self->second.empty()) self_unmatched_.erase(self);
        r->state = State::kDone;
        if (r->buf.size() > r->capacity) {  // as from a peer (ReceiveProbed)
          r->refused_bytes = r->buf.size();
          r->refused_cap = r->capacity;
          ++counters_[rank_].refused_messages;
          Bytes().swap(r->buf);
        }
        q.pop_front();
        continue;
      }
      if (auto e = early_.find(r->wire_tag); e != early_.end()) {
        const Early m = e->second.front();
        e->second.pop_front();
        if (e->second.empty()) early_.erase(e);
        EarlyUse& use = early_use_[r->peer];
        use.messages -= 1;
        use.bytes -= m.counted;
        q.pop_front();
        ReceiveProbed(r, m.msg, m.info);
        continue;
      }
      ucp_tag_recv_info_t info = {};
      ucp_tag_message_h msg = ucp_tag_probe_nb(worker_, r->wire_tag, kFullMask, 1, &info);
      if (msg == nullptr) break;
      q.pop_front();
      ReceiveProbed(r, msg, info);
    }
    it = q.empty() ? queued_.erase(it) : std::next(it);
  }
}

// UCX 1.13's largest eager message where this transport sets the threshold
// (UcxOptions::rndv_thresh_bytes' default); larger ones wait as a header.
constexpr size_t kMostHeldBytes = 256 * 1024;

size_t UcxTransport::EarlyBytesCap() const {
  return std::max(options_.unexpected_bytes_per_peer, 4 * options_.max_message_bytes);
}

void UcxTransport::Discard(ucp_tag_message_h msg) {
  auto r = std::make_unique<Request>();
  r->buf.resize(1);
  r->state = State::kInFlight;
  ucp_request_param_t param = {};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
  param.cb.recv = &RecvCallback;
  param.user_data = r.get();
  param.datatype = ucp_dt_make_contig(1);
  ucs_status_ptr_t p = ucp_tag_msg_recv_nbx(worker_, r->buf.data(), r->buf.size(), msg, &param);
  if (UCS_PTR_IS_PTR(p)) {
    r->ucx = p;
    zombies_.push_back(std::move(r));  // freed once it ends (ReapZombies)
  }
}

void UcxTransport::DrainUnexpected() {
  if (options_.unexpected_bytes_per_peer == 0 && options_.unexpected_messages_per_peer == 0) {
    return;
  }
  const uint64_t this_generation = (uint64_t{generation_} << kGenerationShift) & kGenerationMask;
  // Bounded per call: the caller's own matching goes on between batches.
  for (int i = 0; i < 256; ++i) {
    ucp_tag_recv_info_t info = {};
    ucp_tag_message_h msg = ucp_tag_probe_nb(worker_, this_generation, kGenerationMask, 1, &info);
    if (msg == nullptr) return;
    const int peer = static_cast<int>((info.sender_tag >> kTagBits) & (kMaxRanks - 1));
    if (peer >= size_ || peer == rank_) {  // a rank this communicator lacks, or forged as ours
      Discard(msg);
      continue;
    }
    if (!peer_status_[peer].ok()) {
      ++counters_[peer].dropped_messages;
      Discard(msg);
      continue;
    }
    // UCX holds an eager message's payload, and only a header for a
    // rendezvous: counted at most at the eager threshold.
    const size_t counted = std::min<size_t>(info.length, kMostHeldBytes);
    EarlyUse& use = early_use_[peer];
    use.messages += 1;
    use.bytes += counted;
    ++counters_[peer].early_messages;
    early_[info.sender_tag].push_back(Early{msg, info, counted});
    const bool over_messages = options_.unexpected_messages_per_peer > 0 &&
                               use.messages > options_.unexpected_messages_per_peer;
    const bool over_bytes = options_.unexpected_bytes_per_peer > 0 && use.bytes > EarlyBytesCap();
    if (over_messages || over_bytes) Blame(peer);
  }
}

void UcxTransport::Blame(int peer) {
  const EarlyUse use = early_use_[peer];
  peer_status_[peer] = absl::ResourceExhaustedError(
      absl::StrCat("rank ", rank_, ": peer ", peer, " sent ", use.messages, " messages (",
                   use.bytes, " bytes) that no receive took, over the cap of ",
                   options_.unexpected_messages_per_peer, " messages or ", EarlyBytesCap(),
                   " bytes per peer (tags no schedule receives?): peer ", peer, " is blamed"));
  // What it sent is discarded: UCX frees it.
  for (auto it = early_.begin(); it != early_.end();) {
    std::deque<Early>& q = it->second;
    for (auto m = q.begin(); m != q.end();) {
      if (static_cast<int>((m->info.sender_tag >> kTagBits) & (kMaxRanks - 1)) != peer) {
        ++m;
        continue;
      }
      ++counters_[peer].dropped_messages;
      Discard(m->msg);
      m = q.erase(m);
    }
    it = q.empty() ? early_.erase(it) : std::next(it);
  }
  early_use_[peer] = EarlyUse{};
}

int UcxTransport::Progress() {
  if (!zombies_.empty()) ReapZombies();
  int events = 0;
  // Bounded so a busy worker cannot starve the matching below.
  for (int i = 0; i < 64; ++i) {
    unsigned n = ucp_worker_progress(worker_);
    if (n == 0) break;
    events += static_cast<int>(n);
  }
  MatchQueued();
  DrainUnexpected();
  return events;
}

std::string UcxTransport::Describe(const Request& r) const {
  return absl::StrCat("rank ", rank_, ": ", r.is_send ? "send to" : "receive from", " peer ",
                      r.peer, " tag ", r.tag);
}

std::optional<absl::Status> UcxTransport::Outcome(Request& r) {
  if (r.direct && !r.settled && (r.state == State::kDone || r.state == State::kFailed)) {
    SettleDirect(&r);
  }
  switch (r.state) {
    case State::kDone:
    case State::kFailed:
      if (r.refused_bytes > 0) {
        return absl::ResourceExhaustedError(
            absl::StrCat(Describe(r), ": peer ", r.peer, " sent ", r.refused_bytes,
                         " bytes, over the receive cap of ", r.refused_cap));
      }
      if (r.state == State::kDone) return absl::OkStatus();
      return absl::UnavailableError(
          absl::StrCat(Describe(r), " failed: ", ucs_status_string(r.ucx_status),
                       peer_status_[r.peer].ok() ? "" : " (peer failed)"));
    case State::kQueued:
    case State::kInFlight:
      if (absl::IsResourceExhausted(peer_status_[r.peer])) {  // blamed (Blame)
        return absl::ResourceExhaustedError(
            absl::StrCat(Describe(r), ": ", peer_status_[r.peer].message()));
      }
      if (!peer_status_[r.peer].ok()) {
        return absl::UnavailableError(
            absl::StrCat(Describe(r), ": peer ", r.peer, " is dead or unreachable"));
      }
      return std::nullopt;
  }
  return std::nullopt;
}

absl::Status UcxTransport::Release(RequestId id, absl::Status outcome, Bytes* out) {
  auto it = requests_.find(id);
  std::unique_ptr<Request> r = std::move(it->second);
  requests_.erase(it);
  if (outcome.ok()) {
    if (r->is_send) {
      pool_.Give(std::move(r->buf));  // UCX is done with it
    } else {
      if (!r->internal) {
        counters_[r->peer].recv_bytes += r->buf.size();
        counters_[r->peer].recv_messages += 1;
        Book(*r);
      }
      if (out != nullptr) *out = std::move(r->buf);
    }
    if (r->ucx != nullptr) ucp_request_free(r->ucx);
    return outcome;
  }
  Abandon(std::move(r));
  return outcome;
}

Bytes UcxTransport::TakeBuffer(size_t bytes) {
  if (!pool_.Has(bytes)) return Transport::TakeBuffer(bytes);
  Bytes b = pool_.Take(bytes);
  b.clear();  // keeps the capacity, so the caller's appends neither allocate nor fault
  return b;
}

void UcxTransport::Book(const Request& r) {
  using Seconds = std::chrono::duration<double>;
  profile_.receives += 1;
  profile_.match_wait_s += Seconds(r.matched_at - r.posted_at).count();
  profile_.receive_s += Seconds(r.landed_at - r.matched_at).count();
  profile_.alloc_s += r.alloc_s;
  profile_.pooled += r.pooled ? 1 : 0;
  profile_.deliver_s += Seconds(Clock::now() - r.landed_at).count();
}

void UcxTransport::Abandon(std::unique_ptr<Request> r) {
  if (r->state == State::kQueued) {
    auto q = queued_.find(r->wire_tag);
    if (q != queued_.end()) {
      std::erase(q->second, r.get());
      if (q->second.empty()) queued_.erase(q);
    }
    return;
  }
  if (r->ucx == nullptr) return;
  if (r->state == State::kInFlight) {
    ucp_request_cancel(worker_, r->ucx);
    zombies_.push_back(std::move(r));
    return;
  }
  ucp_request_free(r->ucx);
}

void UcxTransport::ReapZombies() {
  for (size_t i = 0; i < zombies_.size();) {
    if (zombies_[i]->state != State::kInFlight) {
      ucp_request_free(zombies_[i]->ucx);
      zombies_[i] = std::move(zombies_.back());
      zombies_.pop_back();
    } else {
      ++i;
    }
  }
}

// Busy-polls while there is traffic, then yields and finally sleeps briefly,
// so idle ranks sharing cores do not starve the ones doing work.
void UcxTransport::Backoff(int events, int& idle) {
  if (events > 0) {
    idle = 0;
    return;
  }
  ++idle;
  if (idle < 64) return;
  if (idle < 1024) {
    sched_yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

absl::Status UcxTransport::Wait(RequestId id, Deadline deadline, Bytes* out) {
  auto it = requests_.find(id);
  if (it == requests_.end()) {
    return absl::NotFoundError(absl::StrCat("rank ", rank_, ": unknown request ", id));
  }
  Request& r = *it->second;
  int idle = 0;
  for (;;) {
    int events = Progress();
    if (std::optional<absl::Status> done = Outcome(r)) return Release(id, *done, out);
    if (Clock::now() >= deadline) {
      // The request stays posted: the caller may Wait again or CancelAll.
      return absl::DeadlineExceededError(absl::StrCat(Describe(r), " timed out"));
    }
    Backoff(events, idle);
  }
}

absl::StatusOr<bool> UcxTransport::Test(RequestId id, Bytes* out) {
  auto it = requests_.find(id);
  if (it == requests_.end()) {
    return absl::NotFoundError(absl::StrCat("rank ", rank_, ": unknown request ", id));
  }
  Progress();
  std::optional<absl::Status> done = Outcome(*it->second);
  if (!done) return false;
  absl::Status s = Release(id, *done, out);
  if (!s.ok()) return s;
  return true;
}

void UcxTransport::CancelAll(Deadline deadline) {
  queued_.clear();
  for (auto& [id, r] : requests_) {
    if (r->state == State::kQueued) continue;  // never reached UCX
    if (r->ucx == nullptr) continue;
    if (r->state == State::kInFlight) {
      ucp_request_cancel(worker_, r->ucx);
      zombies_.push_back(std::move(r));
    } else {
      ucp_request_free(r->ucx);
    }
  }
  requests_.clear();
  int idle = 0;
  while (!zombies_.empty() && Clock::now() < deadline) {
    int events = Progress();
    Backoff(events, idle);
  }
}

}  // namespace ucx_internal
}  // namespace gradex
