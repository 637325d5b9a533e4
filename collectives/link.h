// One call's view of the transport: stamps frames with the call's identity,
// derives tags, and books the time spent communicating.
#ifndef GRADEX_COLLECTIVES_LINK_H_
#define GRADEX_COLLECTIVES_LINK_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "collectives/frame.h"
#include "collectives/sparse_allreduce.h"
#include "collectives/tag_space.h"

namespace gradex {

class Link {
 public:
  Link(const CallContext& ctx, AlgorithmId algorithm, PhaseTimes* times)
      : ctx_(ctx), algorithm_(algorithm), times_(times) {}

  int rank() const { return ctx_.transport->rank(); }
  int size() const { return ctx_.transport->size(); }
  Deadline deadline() const { return ctx_.deadline; }

  FrameMeta meta(uint16_t phase) const {
    return {ctx_.job_id, ctx_.epoch, ctx_.call_id, algorithm_, phase};
  }

  // Sends `out` to global rank `to` and receives one message from `from`,
  // both under the tag of (phase, sub). Errors name the algorithm, phase, sub
  // and peers.
  absl::StatusOr<Bytes> Exchange(int to, Bytes out, int from, uint16_t phase, uint32_t sub);

 private:
  const CallContext& ctx_;
  AlgorithmId algorithm_;
  PhaseTimes* times_;
};

}  // namespace gradex

#endif  // GRADEX_COLLECTIVES_LINK_H_
