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

void RecvCallback(void* /*request*/, ucs_status_t status, const ucp_tag_recv_info_t* /*info*/,
                  void* user_data) {
  static_cast<Request*>(user_data)->Finish(status);
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
  queued_[r->wire_tag].push_back(r.get());
  RequestId id = next_id_++;
  requests_.emplace(id, std::move(r));
  // Match right away if the message is already here (cheap: a probe).
  MatchQueued();
  return id;
}

void UcxTransport::ReceiveProbed(Request* r, ucp_tag_message_h msg,
                                 const ucp_tag_recv_info_t& info) {
  // The probe told the length the peer announced; the receive takes at most
  // what it was posted for and the process-wide cap, whichever is smaller.
  const size_t cap = options_.max_message_bytes > 0
                         ? std::min(options_.max_message_bytes, r->capacity)
                         : r->capacity;
  const bool refused = info.length > cap;
  if (refused) {
    r->refused_bytes = info.length;
    r->refused_cap = cap;
    if (r->peer >= 0 && r->peer < size_) ++counters_[r->peer].refused_messages;
  }
  r->buf.resize(refused ? 1 : info.length);
  r->state = State::kInFlight;
  ucp_request_param_t param = {};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
  param.cb.recv = &RecvCallback;
  param.user_data = r;
  param.datatype = ucp_dt_make_contig(1);
  ucs_status_ptr_t p = ucp_tag_msg_recv_nbx(worker_, r->buf.data(), r->buf.size(), msg, &param);
  if (UCS_PTR_IS_ERR(p)) {
    r->Finish(UCS_PTR_STATUS(p));
  } else if (p == nullptr) {
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
      ucp_tag_recv_info_t info = {};
      ucp_tag_message_h msg = ucp_tag_probe_nb(worker_, r->wire_tag, kFullMask, 1, &info);
      if (msg == nullptr) break;
      q.pop_front();
      ReceiveProbed(r, msg, info);
    }
    it = q.empty() ? queued_.erase(it) : std::next(it);
  }
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
  return events;
}

std::string UcxTransport::Describe(const Request& r) const {
  return absl::StrCat("rank ", rank_, ": ", r.is_send ? "send to" : "receive from", " peer ",
                      r.peer, " tag ", r.tag);
}

std::optional<absl::Status> UcxTransport::Outcome(Request& r) {
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
    if (!r->is_send) {
      if (!r->internal) {
        counters_[r->peer].recv_bytes += r->buf.size();
        counters_[r->peer].recv_messages += 1;
      }
      if (out != nullptr) *out = std::move(r->buf);
    }
    if (r->ucx != nullptr) ucp_request_free(r->ucx);
    return outcome;
  }
  Abandon(std::move(r));
  return outcome;
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
