#include "collectives/link.h"

#include "absl/strings/str_cat.h"
#include "collectives/phase_timer.h"

namespace gradex {

absl::StatusOr<Bytes> Link::Exchange(int to, Bytes out, int from, uint16_t phase, uint32_t sub) {
  PhaseTimer timer(&times_->communication_s);
  uint64_t tag = MessageTag(phase, ctx_.call_id, sub);
  absl::StatusOr<Bytes> in =
      SendRecv(*ctx_.transport, to, tag, std::move(out), from, tag, ctx_.deadline);
  if (!in.ok()) {
    return absl::Status(in.status().code(),
                        absl::StrCat("rank ", rank(), " algorithm ", static_cast<int>(algorithm_),
                                     " phase ", phase, " step ", sub, " (send to ", to,
                                     ", receive from ", from, "): ", in.status().message()));
  }
  return in;
}

}  // namespace gradex
