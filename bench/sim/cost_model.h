// The simulator's view of the catalog's Table 1 rows (catalog/cost_rows.h):
// time = α · latency + β · bytes, by algorithm name.
#ifndef GRADEX_BENCH_SIM_COST_MODEL_H_
#define GRADEX_BENCH_SIM_COST_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "catalog/catalog.h"

namespace gradex::sim {

using CostRange = catalog::CostRange;

// `teams` is the SAG team count (1 for other algorithms). NOT_FOUND for names
// without a Table 1 row.
absl::StatusOr<CostRange> Table1Cost(const std::string& algo, int p, uint64_t n, double density,
                                     int teams);

// Every catalog algorithm that has a Table 1 row.
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
