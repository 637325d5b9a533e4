// How many elements a simulated run can afford: P ranks in one process each
// hold a gradient, a residual and a copy of it (the conservation check), plus
// the result and the messages in flight. When N does not fit the budget the
// run uses N1 = N/2^j and N1/2 and extrapolates to N (see Extrapolate).
#ifndef GRADEX_BENCH_SIM_MEMORY_PLAN_H_
#define GRADEX_BENCH_SIM_MEMORY_PLAN_H_

#include <cstdint>
#include <string>

namespace gradex::sim {

// Estimated peak bytes of a run (all ranks plus the shared reference sums),
// from the algorithm's memory model in the catalog (catalog::MemoryModel: the
// entries it gathers per rank, a dense result, costs that grow with P
// whatever N). An algorithm the catalog lacks is charged an all-gather of
// every rank's selection (P·k entries per rank).
uint64_t EstimateBytes(const std::string& algo, bool dense, int p, uint64_t n, double density);

struct ElementPlan {
  uint64_t n_run = 0;     // elements actually simulated (== n when it fits)
  uint64_t n_second = 0;  // 0, or n_run / 2 for the extrapolation
};

// n_run stops at 1024 elements; a plan whose estimate at n_run is still over
// the budget does not fit at any N (SimulateAlgorithm skips it).
ElementPlan PlanElements(const std::string& algo, bool dense, int p, uint64_t n, double density,
                         uint64_t budget_bytes);

// Every quantity of these algorithms is affine in N at fixed P and density
// under the α-β model (message counts do not depend on N, sizes are
// proportional to it up to rounding), so two runs give the value at N:
// v(N) = v1 + (v1 - v2) (N - n1) / (n1 - n2).
double Extrapolate(double v1, uint64_t n1, double v2, uint64_t n2, uint64_t n);

}  // namespace gradex::sim

#endif  // GRADEX_BENCH_SIM_MEMORY_PLAN_H_
