#include "bench/sim/memory_plan.h"

#include <algorithm>

namespace gradex::sim {

uint64_t EstimateBytes(const std::string& algo, bool dense, int p, uint64_t n, double density) {
  const double N = static_cast<double>(n), k = density * N;
  // gradient, residual, residual copy
  double per_rank = 12 * N;
  // Dense results (dense algorithms, SparCML's dense gather, TopkDSA past its
  // switch) hold the result and frames of it.
  if (dense || algo == "sparcml-dsar-split" || algo == "topkdsa") {
    per_rank += 4 * N + 8 * N;  // dense result, frames in flight
  }
  if (!dense) {
    // Entries gathered per rank: P·k for all-gather-style algorithms (2P·k
    // for gaussiank, whose threshold may pass 2k), a few k for the rest.
    // Received buffers and send copies hold them whatever N is; the merged
    // result is capped by N.
    const bool local_gather = algo.rfind("spardl", 0) == 0 || algo == "gtopk" || algo == "oktopk";
    const double g = (local_gather ? 4.0 : (algo == "gaussiank" ? 2.0 * p : p)) * k;
    per_rank += 2 * 8 * g + 2 * 8 * std::min(N, g);
  }
  // Ok-Topk's boundary agreement all-gathers every rank's P-1 proposed
  // boundaries (4-byte words), received and forwarded: 2·4·P(P-1) per rank
  // whatever N (9.4 GB peak at P = 1024, N = 97,656).
  if (algo == "oktopk") per_rank += 8.0 * p * (p - 1);
  // Measured per-rank costs that grow with P whatever N (peak RSS at
  // P = 1024, N = 1024): dense-ring 3.0 GB (0.76 GB at P = 512), the split
  // reduce-scatters 1.76 GB; the 4 GiB sweep's dense-ring row peaked at 4.5.
  if (algo == "dense-ring") per_rank += 3072.0 * p;
  if (algo == "sparcml-ssar-split" || algo == "sparcml-dsar-split" || algo == "topkdsa") {
    per_rank += 1800.0 * p;
  }
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
