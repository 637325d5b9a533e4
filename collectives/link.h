// One call's view of the transport, and the one way every algorithm sends:
// stamps frames with the call's identity, derives tags from the tag space
// (tag_space.h), applies the call's deadline, words errors the same way, and
// books the time spent communicating. Paired exchanges (rings, Bruck,
// recursive doubling), one-way messages (trees, folds) and posted messages
// kept in flight (a bucketed all-to-all) are all served here.
#ifndef GRADEX_COLLECTIVES_LINK_H_
#define GRADEX_COLLECTIVES_LINK_H_

#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectives/sparse_allreduce.h"
#include "collectives/tag_space.h"
#include "collectives/wire/frame.h"

namespace gradex::collectives {

class Link {
 public:
  Link(const CallContext& ctx, wire::AlgorithmId algorithm, PhaseTimes* times)
      : ctx_(ctx), algorithm_(algorithm), times_(times) {}

  int rank() const { return ctx_.transport->rank(); }
  int size() const { return ctx_.transport->size(); }
  transport::Deadline deadline() const { return ctx_.deadline; }

  wire::FrameMeta meta(uint16_t phase) const {
    wire::FrameMeta m;
    m.job_id = ctx_.job_id;
    m.epoch = ctx_.epoch;
    m.step = ctx_.call_id;
    m.algorithm = algorithm_;
    m.phase = phase;
    m.sender = static_cast<uint32_t>(ctx_.transport->rank());
    m.refuse_nonfinite = ctx_.refuse_nonfinite;
    return m;
  }
  // The meta a message received from global rank `from` is decoded with: a
  // refused frame of it blames `from` (CallContext::blame).
  wire::FrameMeta meta(uint16_t phase, int from) const {
    wire::FrameMeta m = meta(phase);
    m.from = from;
    m.blame = ctx_.blame;
    return m;
  }

  // Every receive is capped: at `expect_bytes` where the
  // schedule knows the most its message can hold (its blocks and their
  // capacities: ExpectedMessageBytes), else at the call's bound
  // (CallContext::max_message_bytes); a longer message is refused at the
  // transport, RESOURCE_EXHAUSTED naming the peer, never allocated.

  // Sends `out` to global rank `to` and receives one message from `from`,
  // both under the tag of (phase, sub). Errors name the algorithm, phase, sub
  // and peers.
  absl::StatusOr<transport::Bytes> Exchange(int to, transport::Bytes out, int from, uint16_t phase,
                                            uint32_t sub, size_t expect_bytes = 0);

  // One-way halves, for schedules that do not pair every send with a receive
  // (reduction and broadcast trees, the non-power-of-two folds). Send waits until the
  // transport has taken the message.
  absl::Status Send(int to, transport::Bytes out, uint16_t phase, uint32_t sub);
  absl::StatusOr<transport::Bytes> Recv(int from, uint16_t phase, uint32_t sub,
                                        size_t expect_bytes = 0);

  // A message posted and not yet completed, for schedules that keep several
  // in flight (a bucketed all-to-all). Complete it with Wait.
  struct Pending {
    transport::RequestId id = 0;
    int peer = -1;
    uint16_t phase = 0;
    uint32_t sub = 0;
    bool send = false;
    bool posted() const { return peer >= 0; }
  };
  absl::StatusOr<Pending> PostSend(int to, transport::Bytes out, uint16_t phase, uint32_t sub);
  absl::StatusOr<Pending> PostRecv(int from, uint16_t phase, uint32_t sub, size_t expect_bytes = 0);
  // Waits for `p` until the call's deadline; a receive's message goes to `in`.
  absl::Status Wait(const Pending& p, transport::Bytes* in);

  // A buffer to build an outgoing frame of about `bytes` in, and the way
  // back for a received one once decoded (Transport::TakeBuffer/Recycle):
  // large dense frames then reuse memory instead of faulting in new pages.
  transport::Bytes Buffer(size_t bytes) const { return ctx_.transport->TakeBuffer(bytes); }
  void Recycle(transport::Bytes in) const { ctx_.transport->Recycle(std::move(in)); }

 private:
  // Unbooked halves the public calls share (each books its time once).
  absl::StatusOr<Pending> Post(bool send, int peer, transport::Bytes out, uint16_t phase,
                               uint32_t sub, size_t expect_bytes = 0);
  // The cap of a receive: the smaller of the schedule's and the call's
  // (SIZE_MAX when neither is set).
  size_t RecvCap(size_t expect_bytes) const;
  absl::Status Complete(const Pending& p, transport::Bytes* in);
  // What every message goes through before it is sent: its frames stamped
  // with this rank, and (where the epoch refuses non-finite values) checked
  // for a sum that overflowed (CheckFramesFinite).
  absl::Status Outgoing(transport::Bytes* out) const;
  // What every received message goes through first: its frames' sender
  // checked against `from`, a mismatch blaming `from`.
  absl::Status Incoming(const transport::Bytes& in, int from) const;
  // Blames `peer` in the call's FrameBlame when the transport blamed it for a
  // flood of messages no receive took.
  void BlameFlooder(int peer) const;
  absl::Status Annotate(const absl::Status& s, uint16_t phase, uint32_t sub,
                        absl::string_view peers) const;

  const CallContext& ctx_;
  wire::AlgorithmId algorithm_;
  PhaseTimes* times_;
};

}  // namespace gradex::collectives

#endif  // GRADEX_COLLECTIVES_LINK_H_
