// dense-rabenseifner: the dense baseline of Rabenseifner (Thakur, Rabenseifner
// and Gropp 2005): recursive-halving reduce-scatter then recursive-doubling
// all-gather over p2 = 2^floor(log2 P) ranks, 2(p2-1)/p2 of the gradient sent
// per rank in 2 log2(p2) messages. Other P fold onto p2 (power_of_two_fold.h):
// a folded pair moves the whole gradient once each way on top of that.
// Every element is summed on the one rank that owns its block and then copied
// out, so every rank holds the same bits.
#include <algorithm>

#include "collectives/algorithms/dense_allreduce.h"
#include "collectives/algorithms/power_of_two_fold.h"
#include "collectives/block_layout.h"
#include "collectives/link.h"
#include "collectives/phase_timer.h"

namespace gradex::collectives::algorithms {
namespace {

enum : uint16_t {
  kPhaseFoldIn = 1,
  kPhaseReduceScatter = 2,
  kPhaseAllGather = 3,
  kPhaseFoldOut = 4,
};

// Elements of blocks [first, first + count) of `layout`.
wire::BlockRange Blocks(const BlockLayout& layout, int first, int count) {
  return {static_cast<uint32_t>(layout.bounds()[first]),
          static_cast<uint32_t>(layout.bounds()[first + count])};
}

uint64_t DenseBytes(wire::BlockRange r) {
  return sizeof(wire::FrameHeader) + 4 * uint64_t{r.size()};
}

// The schedule as (send range, receive range) per message of an active rank,
// shared by Run and the volume model so both walk the same blocks.
struct Step {
  uint16_t phase;
  int peer;  // active rank
  wire::BlockRange send, recv;
};

std::vector<Step> ActiveSteps(const BlockLayout& layout, int me) {
  const int p2 = layout.parts();
  std::vector<Step> steps;
  int lo = 0;  // first block of what this rank holds (reduce-scatter: is responsible for)
  for (int d = p2 / 2; d >= 1; d /= 2) {
    const bool upper = (me & d) != 0;
    const int keep = upper ? lo + d : lo;
    steps.push_back({kPhaseReduceScatter, me ^ d, Blocks(layout, upper ? lo : lo + d, d),
                     Blocks(layout, keep, d)});
    lo = keep;
  }
  for (int d = 1; d < p2; d *= 2) {
    const int peer_lo = (me & d) != 0 ? lo - d : lo + d;
    steps.push_back({kPhaseAllGather, me ^ d, Blocks(layout, lo, d), Blocks(layout, peer_lo, d)});
    lo = std::min(lo, peer_lo);
  }
  return steps;
}

class DenseRabenseifner final : public DenseAllreduce {
 public:
  std::string_view name() const override { return "dense-rabenseifner"; }

  absl::StatusOr<Volume> ModelVolume(int rank, int world, size_t n, const AllreduceOptions&,
                                     const CallStats&) const override {
    const PowerOfTwoFold fold(rank, world);
    const wire::BlockRange whole{0, static_cast<uint32_t>(n)};
    Volume v;
    if (fold.partner >= 0) {  // the whole gradient once each way
      v.sent_bytes += DenseBytes(whole);
      v.recv_bytes += DenseBytes(whole);
      ++v.messages;
    }
    if (fold.folded_out) return v;
    for (const Step& s : ActiveSteps(BlockLayout(n, fold.p2, 1.0), fold.active)) {
      v.sent_bytes += DenseBytes(s.send);
      v.recv_bytes += DenseBytes(s.recv);
      ++v.messages;
    }
    return v;
  }

  absl::Status ReduceDense(const CallContext& ctx, float* data, size_t n,
                           PhaseTimes* times) override {
    const PowerOfTwoFold fold(ctx.transport->rank(), ctx.transport->size());
    Link link(ctx, id(), times);
    const wire::BlockRange whole{0, static_cast<uint32_t>(n)};
    if (fold.folded_out) {
      transport::Bytes out;
      wire::AppendDenseFrame(link.meta(kPhaseFoldIn), whole, data, &out);
      absl::Status st = link.Send(fold.partner, std::move(out), kPhaseFoldIn, 0);
      if (!st.ok()) return st;
      absl::StatusOr<transport::Bytes> in =
          link.Recv(fold.partner, kPhaseFoldOut, 0, wire::FrameBytes(whole.size(), whole.size()));
      if (!in.ok()) return in.status();
      PhaseTimer t(&times->communication_s);
      absl::Status decoded =
          wire::DecodeDenseBlock(*in, link.meta(kPhaseFoldOut, fold.partner), whole, false, data);
      link.Recycle(std::move(*in));
      return decoded;
    }
    if (fold.partner >= 0) {
      absl::StatusOr<transport::Bytes> in =
          link.Recv(fold.partner, kPhaseFoldIn, 0, wire::FrameBytes(whole.size(), whole.size()));
      if (!in.ok()) return in.status();
      PhaseTimer t(&times->reduction_s);
      absl::Status st =
          wire::DecodeDenseBlock(*in, link.meta(kPhaseFoldIn, fold.partner), whole, true, data);
      link.Recycle(std::move(*in));
      if (!st.ok()) return st;
    }
    uint32_t sub = 0;
    for (const Step& s : ActiveSteps(BlockLayout(n, fold.p2, 1.0), fold.active)) {
      transport::Bytes out;
      {
        PhaseTimer t(&times->communication_s);
        out = link.Buffer(wire::FrameBytes(s.send.size(), s.send.size()));
        wire::AppendDenseFrame(link.meta(s.phase), s.send, data + s.send.begin, &out);
      }
      const int peer = fold.Global(s.peer);
      // One dense frame of the range this step receives.
      absl::StatusOr<transport::Bytes> in =
          link.Exchange(peer, std::move(out), peer, s.phase, sub++,
                        wire::FrameBytes(s.recv.size(), s.recv.size()));
      if (!in.ok()) return in.status();
      const bool reduce = s.phase == kPhaseReduceScatter;
      PhaseTimer t(reduce ? &times->reduction_s : &times->communication_s);
      absl::Status st = wire::DecodeDenseBlock(*in, link.meta(s.phase, peer), s.recv, reduce,
                                               data + s.recv.begin);
      link.Recycle(std::move(*in));
      if (!st.ok()) return st;
    }
    if (fold.partner >= 0) {
      transport::Bytes out;
      wire::AppendDenseFrame(link.meta(kPhaseFoldOut), whole, data, &out);
      return link.Send(fold.partner, std::move(out), kPhaseFoldOut, 0);
    }
    return absl::OkStatus();
  }
};

}  // namespace

GRADEX_REGISTER_ALGORITHM("dense-rabenseifner",
                          [] { return std::make_unique<DenseRabenseifner>(); });

}  // namespace gradex::collectives::algorithms
