// The Transport interface: tagged, non-blocking point-to-point messages between
// ranks with deadlines and per-peer byte counters. Algorithms see only this.
#ifndef GRADEX_TRANSPORT_TRANSPORT_H_
#define GRADEX_TRANSPORT_TRANSPORT_H_

#include <chrono>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gradex::transport {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

inline Deadline DeadlineIn(std::chrono::milliseconds ms) { return Clock::now() + ms; }

// User tags must stay below 2^kTagBits: implementations may use the high bits
// (e.g. UCX puts the source rank there because UCP tag matching has no source).
inline constexpr int kTagBits = 48;
inline constexpr uint64_t kMaxTag = (uint64_t{1} << kTagBits) - 1;

using Bytes = std::vector<uint8_t>;

struct PeerCounters {
  uint64_t sent_bytes = 0;
  uint64_t recv_bytes = 0;
  uint64_t sent_messages = 0;
  uint64_t recv_messages = 0;
  // Messages longer than the receive they matched was posted for: refused,
  // never allocated (PostRecvAtMost).
  uint64_t refused_messages = 0;
  // Messages that arrived before any receive took them, held by the
  // transport (UCX: drained from its unexpected queue and counted against
  // their sender), and those dropped because their sender went over its cap
  // of such messages (UcxOptions::unexpected_*_per_peer).
  uint64_t early_messages = 0;
  uint64_t dropped_messages = 0;
};

// Where a transport's completed receives spent their time (the transport
// benchmark prints it). Transports that cannot tell leave it zero. There is
// no copy phase: a message lands in the buffer handed to the caller (a copy
// UCX makes out of its own unexpected queue is part of `receive_s`).
struct RecvProfile {
  uint64_t receives = 0;
  // Posted until the message was matched: waiting for the sender, then the
  // probe (UCX receives of unknown size are posted only once probed).
  double match_wait_s = 0;
  // Matched (or posted, for a receive posted with its buffer) until its last
  // byte was in memory.
  double receive_s = 0;
  // Allocating the buffer the message lands in.
  double alloc_s = 0;
  // Receives whose buffer was reused (no page faults, no zero fill).
  uint64_t pooled = 0;
  // In memory until handed to the caller (the caller's polling rhythm).
  double deliver_s = 0;
  // Receives posted to the network with their buffer before the message
  // came (no probe, no extra pass), counted when posted.
  uint64_t posted_direct = 0;

  RecvProfile& operator+=(const RecvProfile& o) {
    receives += o.receives;
    match_wait_s += o.match_wait_s;
    receive_s += o.receive_s;
    alloc_s += o.alloc_s;
    pooled += o.pooled;
    deliver_s += o.deliver_s;
    posted_direct += o.posted_direct;
    return *this;
  }
};

// Opaque handle of a posted operation. 0 is never a valid id.
using RequestId = uint64_t;

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Posts a send; the transport owns `payload` until the request completes.
  // Sending to oneself is allowed (delivered through the same matching).
  virtual absl::StatusOr<RequestId> PostSend(int peer, uint64_t tag, Bytes payload) = 0;

  // Posts a receive of a message of unknown size from `peer` with `tag`.
  // Messages between one (sender, receiver, tag) triple match in posting order.
  virtual absl::StatusOr<RequestId> PostRecv(int peer, uint64_t tag) = 0;
  // The same for a message of at most `capacity` bytes, what the schedule
  // expects there: a longer one is refused, never allocated at the size the
  // peer announced. The receive fails RESOURCE_EXHAUSTED naming the peer,
  // its size and the capacity, and the peer's refused_messages counts it
  // (docs/security.md).
  virtual absl::StatusOr<RequestId> PostRecvAtMost(int peer, uint64_t tag, size_t capacity) = 0;

  // Drives progress until the request completes, fails, or `deadline` passes
  // (DEADLINE_EXCEEDED). For receives, the message is moved into `*out` (may be
  // null for sends). A completed or failed request id is released.
  virtual absl::Status Wait(RequestId request, Deadline deadline, Bytes* out) = 0;

  // Non-blocking check: true when complete (and then as Wait), false if pending.
  virtual absl::StatusOr<bool> Test(RequestId request, Bytes* out) = 0;

  // Cancels every pending request (used after an error so that no buffer is
  // referenced once the caller returns). Never blocks past `deadline`.
  virtual void CancelAll(Deadline deadline) = 0;

  // Gives up on this communicator after a failed call: cancels pending
  // requests, makes every later post fail, and closes the connections so that
  // peers waiting on this rank fail fast instead of at their deadline. A
  // failed step ends the epoch; the next epoch builds a new transport.
  virtual void Abort(Deadline deadline) = 0;
  virtual bool aborted() const = 0;

  // Not OK once `peer` is blamed for flooding this rank with messages no
  // receive took (UcxOptions::unexpected_*_per_peer): the error names it.
  // Every later receive from and send to it fails with that error.
  virtual absl::Status blame(int peer) const { return absl::OkStatus(); }

  // Counters since construction or the last ResetCounters(); payload bytes only.
  virtual PeerCounters counters(int peer) const = 0;
  virtual void ResetCounters() = 0;

  // Since construction or the last ResetCounters(); user receives only.
  virtual RecvProfile recv_profile() const { return {}; }

  // An empty buffer with room for a message of `bytes` the caller will
  // build and send. A transport that keeps buffers (UCX) hands back one it
  // holds, so a large frame costs no allocation and no page faults.
  virtual Bytes TakeBuffer(size_t bytes) {
    Bytes b;
    b.reserve(bytes);
    return b;
  }
  // Gives back a received payload the caller is done with, for the next
  // message's buffer. Optional: dropping it instead is always correct.
  virtual void Recycle(Bytes /*buffer*/) {}

  PeerCounters TotalCounters() const {
    PeerCounters t;
    for (int p = 0; p < size(); ++p) {
      PeerCounters c = counters(p);
      t.sent_bytes += c.sent_bytes;
      t.recv_bytes += c.recv_bytes;
      t.sent_messages += c.sent_messages;
      t.recv_messages += c.recv_messages;
      t.refused_messages += c.refused_messages;
    }
    return t;
  }
};

// Posts a send to `to` and a receive from `from`, waits for both.
// `capacity`: the most the received message may hold (PostRecvAtMost).
absl::StatusOr<Bytes> SendRecv(Transport& t, int to, uint64_t send_tag, Bytes payload, int from,
                               uint64_t recv_tag, Deadline deadline, size_t capacity = SIZE_MAX);

}  // namespace gradex::transport

#endif  // GRADEX_TRANSPORT_TRANSPORT_H_
