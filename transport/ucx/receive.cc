// UcxTransport: how a receive gets its bytes: matched in order to a
// self-send, a held early message or a probe, or posted to UCX with a kept
// buffer (direct); refused when longer than its cap.
#include <algorithm>
#include <chrono>
#include <deque>
#include <iterator>
#include <utility>

#include "transport/ucx/internal.h"

namespace gradex::transport::ucx {
namespace internal {

void UcxTransport::PostDirect(Request* r, size_t cap) {
  r->direct = true;
  if (!r->internal) profile_.posted_direct += 1;
  r->capacity = cap;
  r->matched_at = r->posted_at;
  TakeFromPool(r, cap);
  r->state = State::kInFlight;
  ucp_request_param_t param = RecvParam(r);
  // No immediate completion: a receive of a message already here still gets
  // a request and the callback, which reports the message's length (UCX 1.13
  // leaves recv_info unfilled when it completes a tag receive at once).
  param.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
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
  const ucp_request_param_t param = RecvParam(r);
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

}  // namespace internal
}  // namespace gradex::transport::ucx
