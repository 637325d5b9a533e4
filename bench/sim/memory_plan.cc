#include "bench/sim/memory_plan.h"

#include <algorithm>

namespace gradex::sim {

uint64_t EstimateBytes(const std::string& algo, bool dense, int p, uint64_t n, double density) {
  const double N = static_cast<double>(n), k = density * N;
  // gradient, residual, residual copy
  double per_rank = 12 * N;
  if (dense) {
    per_rank += 4 * N + 8 * N;  // dense result, frames in flight
  } else {
    const bool local_gather = algo.rfind("spardl", 0) == 0 || algo == "gtopk" || algo == "oktopk";
    const double gathered = std::min(N, (local_gather ? 4.0 : p) * k);
    per_rank += 3 * 8 * gathered;  // received entries, merge output, result
  }
  const double shared = 20 * N;  // reference sums (double) and one dense result
  return static_cast<uint64_t>(p * per_rank + shared);
}

ElementPlan PlanElements(const std::string& algo, bool dense, int p, uint64_t n, double density,
                         uint64_t budget_bytes) {
  ElementPlan plan{n, 0};
  while (plan.n_run > 1024 && EstimateBytes(algo, dense, p, plan.n_run, density) > budget_bytes) {
    plan.n_run /= 2;
  }
  if (plan.n_run != n) plan.n_second = plan.n_run / 2;
  return plan;
}

double Extrapolate(double v1, uint64_t n1, double v2, uint64_t n2, uint64_t n) {
  const double slope = (v1 - v2) / (static_cast<double>(n1) - static_cast<double>(n2));
  return v1 + slope * (static_cast<double>(n) - static_cast<double>(n1));
}

}  // namespace gradex::sim
