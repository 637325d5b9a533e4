// What the dense baselines share: gradient + residual is summed over all ranks
// in full, so the residual empties on success and keeps grad + old residual on
// failure. A subclass supplies only the schedule over the dense buffer.
#ifndef GRADEX_COLLECTIVES_ALGORITHMS_DENSE_ALLREDUCE_H_
#define GRADEX_COLLECTIVES_ALGORITHMS_DENSE_ALLREDUCE_H_

#include "collectives/sparse_allreduce.h"

namespace gradex::collectives::algorithms {

class DenseAllreduce : public SparseAllreduce {
 public:
  absl::Status Exchange(const CallContext& ctx, const AllreduceOptions& options,
                        std::span<float> acc, ResidualLedger& ledger, AllreduceResult* result,
                        CallStats* stats) final;

 protected:
  // Reduces `data` (n elements, this rank's grad + residual) in place to the
  // sum over ranks, bitwise the same on every rank.
  virtual absl::Status ReduceDense(const CallContext& ctx, float* data, size_t n,
                                   PhaseTimes* times) = 0;
};

}  // namespace gradex::collectives::algorithms

#endif  // GRADEX_COLLECTIVES_ALGORITHMS_DENSE_ALLREDUCE_H_
