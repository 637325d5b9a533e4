#include "bench/sim/memory_plan.h"

#include <algorithm>

#include "catalog/catalog.h"

namespace gradex::sim {

uint64_t EstimateBytes(const std::string& algo, bool dense, int p, uint64_t n, double density) {
  // The algorithm's memory model (catalog.h); an unknown one gets the
  // defaults, an all-gather of every rank's selection.
  const catalog::AlgorithmSpec* spec = catalog::Find(algo);
  const catalog::MemoryModel m = spec != nullptr ? spec->memory : catalog::MemoryModel{};
  const double N = static_cast<double>(n), k = density * N;
  // gradient, residual, residual copy
  double per_rank = 12 * N;
  // Dense results (dense algorithms, and sparse ones whose gather is dense)
  // hold the result and frames of it.
  if (dense || m.dense_result) {
    per_rank += 4 * N + 8 * N;  // dense result, frames in flight
  }
  if (!dense) {
    // Entries gathered per rank. Received buffers and send copies hold them
    // whatever N is; the merged result is capped by N.
    const double g = (m.gather_k + m.gather_pk * p) * k;
    per_rank += 2 * 8 * g + 2 * 8 * std::min(N, g);
  }
  // Per-rank costs that grow with P whatever N (Ok-Topk's boundary
  // proposals, measured buffers of the dense ring and the split
  // reduce-scatters).
  per_rank += m.per_world_pair_bytes * p * (p - 1);
  per_rank += m.per_world_bytes * p;
  const double shared = 20 * N;  // reference sums (double) and one dense result
  // Allocator slack and transient copies. (The first sweep, with gathers
  // capped by N and no dense-gather term, peaked at 18.7 GB for 4 GiB.)
  return static_cast<uint64_t>(1.25 * (p * per_rank + shared));
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
