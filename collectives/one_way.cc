#include "collectives/one_way.h"

#include "absl/strings/str_cat.h"
#include "collectives/link.h"
#include "collectives/phase_timer.h"

namespace gradex {

absl::Status OneWay::Annotate(const absl::Status& s, const char* what, int peer, uint16_t phase,
                              uint32_t sub) const {
  return absl::Status(
      s.code(),
      absl::StrCat("rank ", ctx_.transport->rank(), " algorithm ", static_cast<int>(algorithm_),
                   " phase ", phase, " step ", sub, " (", what, " ", peer, "): ", s.message()));
}

absl::Status OneWay::Send(int to, Bytes out, uint16_t phase, uint32_t sub) {
  PhaseTimer timer(&times_->communication_s);
  absl::StatusOr<RequestId> id =
      ctx_.transport->PostSend(to, MessageTag(phase, ctx_.call_id, sub), std::move(out));
  if (!id.ok()) return Annotate(id.status(), "send to", to, phase, sub);
  absl::Status s = ctx_.transport->Wait(*id, ctx_.deadline, nullptr);
  if (!s.ok()) return Annotate(s, "send to", to, phase, sub);
  return absl::OkStatus();
}

absl::StatusOr<Bytes> OneWay::Recv(int from, uint16_t phase, uint32_t sub) {
  PhaseTimer timer(&times_->communication_s);
  absl::StatusOr<RequestId> id =
      ctx_.transport->PostRecv(from, MessageTag(phase, ctx_.call_id, sub));
  if (!id.ok()) return Annotate(id.status(), "receive from", from, phase, sub);
  Bytes in;
  absl::Status s = ctx_.transport->Wait(*id, ctx_.deadline, &in);
  if (!s.ok()) return Annotate(s, "receive from", from, phase, sub);
  return in;
}

}  // namespace gradex
