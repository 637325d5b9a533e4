// dense-ring: the dense baseline, ring reduce-scatter then ring all-gather
// (P-1 steps each, 2(P-1)/P of the gradient sent per rank).

#include <cstring>

#include "collectives/block_layout.h"
#include "collectives/dense_allreduce.h"
#include "collectives/link.h"
#include "collectives/phase_timer.h"

namespace gradex {
namespace {

enum : uint16_t { kPhaseReduceScatter = 1, kPhaseAllGather = 2 };

class DenseRing final : public DenseAllreduce {
 public:
  std::string_view name() const override { return "dense-ring"; }
  // 2(P-1) dense frames of one block each.
  absl::StatusOr<Volume> ModelVolume(int rank, int world, size_t n, const AllreduceOptions&,
                                     const CallStats&) const override {
    const BlockLayout layout(n, world, 1.0);
    auto bytes = [&](int b) { return uint64_t{48} + 4 * uint64_t{layout.range(b).size()}; };
    auto mod = [world](int a) { return ((a % world) + world) % world; };
    Volume v;
    for (int s = 0; s < world - 1; ++s) {
      v.sent_bytes += bytes(mod(rank - s)) + bytes(mod(rank + 1 - s));
      v.recv_bytes += bytes(mod(rank - s - 1)) + bytes(mod(rank - s));
      v.messages += 2;
    }
    return v;
  }

  absl::Status ReduceDense(const CallContext& ctx, float* data, size_t n,
                           PhaseTimes* times) override {
    const int p = ctx.transport->size();
    const int r = ctx.transport->rank();
    const BlockLayout layout(n, p, 1.0);
    Link link(ctx, id(), times);
    auto mod = [p](int a) { return ((a % p) + p) % p; };
    absl::Status st;
    for (int s = 0; s < p - 1 && st.ok(); ++s) {
      st =
          Step(link, layout, data, mod(r - s), mod(r - s - 1), kPhaseReduceScatter, s, true, times);
    }
    for (int s = 0; s < p - 1 && st.ok(); ++s) {
      st = Step(link, layout, data, mod(r + 1 - s), mod(r - s), kPhaseAllGather, s, false, times);
    }
    return st;
  }

 private:
  // Sends block `send_b` to the next rank, receives block `recv_b` from the
  // previous one and adds (reduce-scatter) or copies (all-gather) it.
  static absl::Status Step(Link& link, const BlockLayout& layout, float* data, int send_b,
                           int recv_b, uint16_t phase, int sub, bool accumulate,
                           PhaseTimes* times) {
    const int p = link.size(), r = link.rank();
    Bytes out;
    {
      PhaseTimer t(&times->communication_s);
      BlockRange range = layout.range(send_b);
      AppendDenseFrame(link.meta(phase), range, data + range.begin, &out);
    }
    absl::StatusOr<Bytes> in =
        link.Exchange((r + 1) % p, std::move(out), (r + p - 1) % p, phase, sub);
    if (!in.ok()) return in.status();
    PhaseTimer t(accumulate ? &times->reduction_s : &times->communication_s);
    BlockRange range = layout.range(recv_b);
    return DecodeDenseBlock(*in, link.meta(phase), range, accumulate, data + range.begin);
  }
};

}  // namespace

GRADEX_REGISTER_ALGORITHM("dense-ring", [] { return std::make_unique<DenseRing>(); });

}  // namespace gradex
