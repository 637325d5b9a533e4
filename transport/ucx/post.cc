// UcxTransport: posting sends and receives (argument checks, self-sends,
// which receives go to UCX at once) and the buffers callers fill to send.
#include <cstdint>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "transport/ucx/internal.h"

namespace gradex::transport::ucx {
namespace internal {

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
    const ucp_request_param_t param = SendParam(r.get());
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

Bytes UcxTransport::TakeBuffer(size_t bytes) {
  if (!pool_.Has(bytes)) return Transport::TakeBuffer(bytes);
  Bytes b = pool_.Take(bytes);
  b.clear();  // keeps the capacity, so the caller's appends neither allocate nor fault
  return b;
}

}  // namespace internal
}  // namespace gradex::transport::ucx
