#include "collectives/dense_allreduce.h"

#include <algorithm>

#include "collectives/call_checks.h"
#include "collectives/phase_timer.h"

namespace gradex {

absl::Status DenseAllreduce::Run(const CallContext& ctx, const AllreduceOptions& options,
                                 std::span<const float> grad, std::span<float> residual,
                                 AllreduceResult* result, CallStats* stats) {
  absl::Status st = ValidateCall(ctx, options, grad, residual, result, stats);
  if (!st.ok()) return st;
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
  st = Schedule(ctx, result->dense.data(), n, &stats->phases);
  if (!st.ok()) return FailCall(ctx, st);  // residual still holds grad + old residual
  std::fill(residual.begin(), residual.end(), 0.0f);
  stats->result_nnz = result->CountNonZeros();
  stats->result_capacity = n;
  FinishStats(ctx, before, start, stats);
  return absl::OkStatus();
}

}  // namespace gradex
