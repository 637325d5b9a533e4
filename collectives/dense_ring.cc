// dense-ring: the dense baseline, ring reduce-scatter then ring all-gather
// (P-1 steps each, 2(P-1)/P of the gradient sent per rank).
#include "collectives/dense_ring.h"

#include <algorithm>
#include <cstring>

#include "collectives/block_layout.h"
#include "collectives/call_checks.h"
#include "collectives/link.h"
#include "collectives/phase_timer.h"
#include "collectives/volume_model.h"

namespace gradex {
namespace {

enum : uint16_t { kPhaseReduceScatter = 1, kPhaseAllGather = 2 };

class DenseRing final : public SparseAllreduce {
 public:
  std::string_view name() const override { return "dense-ring"; }
  AlgorithmTraits traits() const override { return {.dense = true}; }
  absl::StatusOr<Volume> ModelVolume(int rank, int world, size_t n, const AllreduceOptions& options,
                                     const CallStats&) const override {
    return gradex::ModelVolume(name(), rank, world, n, options);
  }

  absl::Status Run(const CallContext& ctx, const AllreduceOptions& options,
                   std::span<const float> grad, std::span<float> residual, AllreduceResult* result,
                   CallStats* stats) override {
    absl::Status st = ValidateCall(ctx, options, grad, residual, result, stats);
    if (!st.ok()) return st;
    const int p = ctx.transport->size();
    const int r = ctx.transport->rank();
    auto start = Clock::now();
    *stats = CallStats{};
    PeerCounters before = ctx.transport->TotalCounters();
    const size_t n = grad.size();
    result->is_dense = true;
    result->sparse.clear();
    {
      PhaseTimer t(&stats->phases.reduction_s);
      for (size_t i = 0; i < n; ++i) residual[i] += grad[i];
      result->dense.assign(residual.begin(), residual.end());
    }
    const BlockLayout layout(n, p, 1.0);
    Link link(ctx, AlgorithmId::kDenseRing, &stats->phases);
    float* data = result->dense.data();
    auto mod = [p](int a) { return ((a % p) + p) % p; };
    for (int s = 0; s < p - 1 && st.ok(); ++s) {
      st = Step(link, layout, data, mod(r - s), mod(r - s - 1), kPhaseReduceScatter, s, true,
                &stats->phases);
    }
    for (int s = 0; s < p - 1 && st.ok(); ++s) {
      st = Step(link, layout, data, mod(r + 1 - s), mod(r - s), kPhaseAllGather, s, false,
                &stats->phases);
    }
    if (!st.ok()) return FailCall(ctx, st);  // residual still holds grad + old residual
    std::fill(residual.begin(), residual.end(), 0.0f);
    stats->result_nnz = result->CountNonZeros();
    stats->result_capacity = n;
    FinishStats(ctx, before, start, stats);
    return absl::OkStatus();
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

std::unique_ptr<SparseAllreduce> CreateDenseRing() { return std::make_unique<DenseRing>(); }

}  // namespace gradex
