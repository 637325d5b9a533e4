// One-way messages for tree schedules (gtopk's reduction and broadcast trees,
// the non-power-of-two fold of dense-rabenseifner and gtopk): Link pairs every
// send with a receive, a tree does not. Same tags, deadline, error wording and
// time booking as Link::Exchange.
#ifndef GRADEX_COLLECTIVES_ONE_WAY_H_
#define GRADEX_COLLECTIVES_ONE_WAY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/frame.h"
#include "collectives/sparse_allreduce.h"

namespace gradex {

class OneWay {
 public:
  OneWay(const CallContext& ctx, AlgorithmId algorithm, PhaseTimes* times)
      : ctx_(ctx), algorithm_(algorithm), times_(times) {}

  // Sends `out` to `to` and waits until the transport has taken it.
  absl::Status Send(int to, Bytes out, uint16_t phase, uint32_t sub);
  // Receives the message of (phase, sub) from `from`.
  absl::StatusOr<Bytes> Recv(int from, uint16_t phase, uint32_t sub);

 private:
  absl::Status Annotate(const absl::Status& s, const char* what, int peer, uint16_t phase,
                        uint32_t sub) const;

  const CallContext& ctx_;
  AlgorithmId algorithm_;
  PhaseTimes* times_;
};

}  // namespace gradex

#endif  // GRADEX_COLLECTIVES_ONE_WAY_H_
