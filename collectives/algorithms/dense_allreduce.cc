#include "collectives/algorithms/dense_allreduce.h"

#include <algorithm>

#include "collectives/phase_timer.h"

namespace gradex::collectives::algorithms {

absl::Status DenseAllreduce::Exchange(const CallContext& ctx, const AllreduceOptions&,
                                      std::span<float> acc, ResidualLedger&,
                                      AllreduceResult* result, CallStats* stats) {
  const size_t n = acc.size();
  result->is_dense = true;
  result->sparse.clear();
  {
    PhaseTimer t(&stats->phases.reduction_s);
    result->dense.assign(acc.begin(), acc.end());
  }
  absl::Status st = ReduceDense(ctx, result->dense.data(), n, &stats->phases);
  if (!st.ok()) return st;  // acc still holds grad + old residual
  std::fill(acc.begin(), acc.end(), 0.0f);
  stats->result_nnz = result->CountNonZeros();
  stats->result_capacity = n;
  return absl::OkStatus();
}

}  // namespace gradex::collectives::algorithms
