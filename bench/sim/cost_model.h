// The seeds' Table 1 cost formulas (oktopk.txt Table 1; SparDL's own rows as
// reconstructed in DESIGN.md and docs/architecture.md), as
// time = α · latency + β · bytes, where latency counts messages on the
// critical path and bytes are bytes on it (8 per COO entry, 4 per dense
// element; frame headers excluded). Data-dependent rows give a range [lo, hi].
#ifndef GRADEX_BENCH_SIM_COST_MODEL_H_
#define GRADEX_BENCH_SIM_COST_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gradex::sim {

struct CostRange {
  double latency_lo = 0, latency_hi = 0;  // messages (α multipliers)
  double bytes_lo = 0, bytes_hi = 0;      // bytes (β multipliers)
  std::string formula;                    // the row, in words
};

// `teams` is the SAG team count (1 for other algorithms). NOT_FOUND for names
// without a Table 1 row (covap, dgs).
absl::StatusOr<CostRange> Table1Cost(const std::string& algo, int p, uint64_t n, double density,
                                     int teams);

// Every name of DESIGN.md that has a row here.
std::vector<std::string> Table1Names();

// Time of the range's ends under (alpha, beta).
inline double CostLo(const CostRange& c, double alpha, double beta) {
  return alpha * c.latency_lo + beta * c.bytes_lo;
}
inline double CostHi(const CostRange& c, double alpha, double beta) {
  return alpha * c.latency_hi + beta * c.bytes_hi;
}

}  // namespace gradex::sim

#endif  // GRADEX_BENCH_SIM_COST_MODEL_H_
