// dense-ring: the dense baseline, ring reduce-scatter then ring all-gather
// (P-1 steps each, 2(P-1)/P of the gradient sent per rank).

#include "collectives/algorithms/dense_allreduce.h"
#include "collectives/algorithms/ring_allreduce.h"
#include "collectives/link.h"

namespace gradex::collectives::algorithms {
namespace {

class DenseRing final : public DenseAllreduce {
 public:
  std::string_view name() const override { return "dense-ring"; }
  // 2(P-1) dense frames of one block each.
  absl::StatusOr<Volume> ModelVolume(int rank, int world, size_t n, const AllreduceOptions&,
                                     const CallStats&) const override {
    return RingAllreduceVolume(rank, world, n);
  }

  absl::Status ReduceDense(const CallContext& ctx, float* data, size_t n,
                           PhaseTimes* times) override {
    Link link(ctx, id(), times);
    return RingAllreduce(link, data, n, times);
  }
};

}  // namespace

GRADEX_REGISTER_ALGORITHM("dense-ring", [] { return std::make_unique<DenseRing>(); });

}  // namespace gradex::collectives::algorithms
