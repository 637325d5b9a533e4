#include "collectives/link.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/phase_timer.h"

namespace gradex::collectives {
namespace {

std::string PeerText(bool send, int peer) {
  return absl::StrCat(send ? "send to " : "receive from ", peer);
}

}  // namespace

absl::Status Link::Annotate(const absl::Status& s, uint16_t phase, uint32_t sub,
                            absl::string_view peers) const {
  return absl::Status(
      s.code(), absl::StrCat("rank ", rank(), " algorithm ", static_cast<int>(algorithm_),
                             " phase ", phase, " step ", sub, " (", peers, "): ", s.message()));
}

size_t Link::RecvCap(size_t expect_bytes) const {
  const size_t call = ctx_.max_message_bytes > 0 ? ctx_.max_message_bytes : SIZE_MAX;
  return expect_bytes > 0 ? std::min(expect_bytes, call) : call;
}

absl::StatusOr<transport::Bytes> Link::Exchange(int to, transport::Bytes out, int from,
                                                uint16_t phase, uint32_t sub, size_t expect_bytes) {
  PhaseTimer timer(&times_->communication_s);
  uint64_t tag = MessageTag(phase, ctx_.call_id, sub);
  if (absl::Status s = Outgoing(&out); !s.ok()) return Annotate(s, phase, sub, PeerText(true, to));
  absl::StatusOr<transport::Bytes> in = transport::SendRecv(
      *ctx_.transport, to, tag, std::move(out), from, tag, ctx_.deadline, RecvCap(expect_bytes));
  if (!in.ok()) {
    BlameFlooder(to);
    BlameFlooder(from);
    return Annotate(in.status(), phase, sub,
                    absl::StrCat(PeerText(true, to), ", ", PeerText(false, from)));
  }
  if (absl::Status s = Incoming(*in, from); !s.ok()) {
    return Annotate(s, phase, sub, PeerText(false, from));
  }
  return in;
}

absl::StatusOr<Link::Pending> Link::Post(bool send, int peer, transport::Bytes out, uint16_t phase,
                                         uint32_t sub, size_t expect_bytes) {
  const uint64_t tag = MessageTag(phase, ctx_.call_id, sub);
  if (absl::Status s = send ? Outgoing(&out) : absl::OkStatus(); !s.ok()) {
    return Annotate(s, phase, sub, PeerText(true, peer));
  }
  const size_t cap = RecvCap(expect_bytes);
  absl::StatusOr<transport::RequestId> id =
      send             ? ctx_.transport->PostSend(peer, tag, std::move(out))
      : cap < SIZE_MAX ? ctx_.transport->PostRecvAtMost(peer, tag, cap)
                       : ctx_.transport->PostRecv(peer, tag);
  if (!id.ok()) {
    BlameFlooder(peer);
    return Annotate(id.status(), phase, sub, PeerText(send, peer));
  }
  return Pending{*id, peer, phase, sub, send};
}

absl::Status Link::Outgoing(transport::Bytes* out) const {
  // Every frame names the rank that put it on the link (frame.h).
  if (absl::Status s = wire::StampFrameSenders(out, static_cast<uint32_t>(rank())); !s.ok())
    return s;
  return ctx_.refuse_nonfinite ? wire::CheckFramesFinite(*out) : absl::OkStatus();
}

absl::Status Link::Incoming(const transport::Bytes& in, int from) const {
  absl::Status s = wire::CheckFrameSenders(in, static_cast<uint32_t>(from));
  if (!s.ok() && ctx_.blame != nullptr) ctx_.blame->Blame(from, std::string(s.message()));
  return s;
}

void Link::BlameFlooder(int peer) const {
  if (ctx_.blame == nullptr) return;
  // Over its cap of messages no receive took (Transport::blame): blamed like
  // a bad frame, so the step's report names it.
  if (absl::Status b = ctx_.transport->blame(peer); !b.ok()) {
    ctx_.blame->Blame(peer, std::string(b.message()));
  }
}

absl::Status Link::Complete(const Pending& p, transport::Bytes* in) {
  absl::Status s = ctx_.transport->Wait(p.id, ctx_.deadline, p.send ? nullptr : in);
  if (!s.ok()) BlameFlooder(p.peer);
  if (s.ok() && !p.send) s = Incoming(*in, p.peer);
  if (!s.ok()) return Annotate(s, p.phase, p.sub, PeerText(p.send, p.peer));
  return absl::OkStatus();
}

absl::StatusOr<Link::Pending> Link::PostSend(int to, transport::Bytes out, uint16_t phase,
                                             uint32_t sub) {
  PhaseTimer timer(&times_->communication_s);
  return Post(true, to, std::move(out), phase, sub);
}

absl::StatusOr<Link::Pending> Link::PostRecv(int from, uint16_t phase, uint32_t sub,
                                             size_t expect_bytes) {
  PhaseTimer timer(&times_->communication_s);
  return Post(false, from, {}, phase, sub, expect_bytes);
}

absl::Status Link::Wait(const Pending& p, transport::Bytes* in) {
  PhaseTimer timer(&times_->communication_s);
  return Complete(p, in);
}

absl::Status Link::Send(int to, transport::Bytes out, uint16_t phase, uint32_t sub) {
  PhaseTimer timer(&times_->communication_s);
  absl::StatusOr<Pending> p = Post(true, to, std::move(out), phase, sub);
  if (!p.ok()) return p.status();
  return Complete(*p, nullptr);
}

absl::StatusOr<transport::Bytes> Link::Recv(int from, uint16_t phase, uint32_t sub,
                                            size_t expect_bytes) {
  PhaseTimer timer(&times_->communication_s);
  absl::StatusOr<Pending> p = Post(false, from, {}, phase, sub, expect_bytes);
  if (!p.ok()) return p.status();
  transport::Bytes in;
  absl::Status s = Complete(*p, &in);
  if (!s.ok()) return s;
  return in;
}

}  // namespace gradex::collectives
