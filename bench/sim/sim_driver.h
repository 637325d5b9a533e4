// One row of gradex-sim: resolves teams and the element plan for an
// algorithm, runs it (twice when N is shrunk), and compares it with Table 1.
#ifndef GRADEX_BENCH_SIM_SIM_DRIVER_H_
#define GRADEX_BENCH_SIM_SIM_DRIVER_H_

#include <string>
#include <vector>

#include "bench/sim/cost_model.h"
#include "bench/sim/sim_flags.h"
#include "bench/sim/sim_run.h"

namespace gradex::sim {

struct SimRow {
  std::string algo;
  int ranks = 0, teams = 1;
  uint64_t elements = 0;  // N the row speaks for
  uint64_t n_run = 0;     // N simulated
  uint64_t n_second = 0;  // 0, or the second N of an extrapolation
  std::string skipped;    // why it did not run (empty when it ran)
  std::string error;      // a failed call
  SimOutcome at_n;        // times and bytes at `elements` (extrapolated if needed)
  bool has_model = false;
  CostRange model;
  double model_lo_s = 0, model_hi_s = 0;
  uint64_t peak_rss = 0;
};

// Teams used for `algo` (1 unless it uses teams), or a reason to skip.
int ResolveTeams(bool uses_teams, const SimFlags& flags, std::string* skip, bool pow2_only);

SimRow SimulateAlgorithm(const SimFlags& flags, const std::string& algo);

std::string RowJson(const SimRow& row, const SimFlags& flags);
std::string RowsTable(const std::vector<SimRow>& rows, const SimFlags& flags);

}  // namespace gradex::sim

#endif  // GRADEX_BENCH_SIM_SIM_DRIVER_H_
