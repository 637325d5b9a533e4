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
  // The time at `elements` came from DecomposeTime (the extrapolation of the
  // time itself was refused); time_lo_s is the decomposition's lower end.
  bool decomposed = false;
  double time_lo_s = 0;
};

// Under the α-β model a call's time is its longest path of α + β·m steps, so
// max(α·L, β·B) <= time <= α·L + β·B, with L the messages and B the bytes on
// the critical path: the times of the same run with β = 0 and with α = 0.
// B grows with N even where the time does not (a latency-bound regime whose
// critical path moves with N), so it extrapolates from n1 and n2; L is
// counted at n1. time_hi_s is what gradex-sim reports (exact when one path
// carries both; checked in tests/bench/sim_test.cc).
struct Decomposition {
  double messages = 0;  // L at n1
  double bytes = 0;     // B extrapolated to n
  double time_lo_s = 0, time_hi_s = 0;
};
absl::StatusOr<Decomposition> DecomposeTime(const SimConfig& config, uint64_t n1, uint64_t n2,
                                            uint64_t n);

// Teams used for `algo` (1 unless it uses teams), or a reason to skip.
int ResolveTeams(bool uses_teams, const SimFlags& flags, std::string* skip, bool pow2_only);

SimRow SimulateAlgorithm(const SimFlags& flags, const std::string& algo);

std::string RowJson(const SimRow& row, const SimFlags& flags);
std::string RowsTable(const std::vector<SimRow>& rows, const SimFlags& flags);

}  // namespace gradex::sim

#endif  // GRADEX_BENCH_SIM_SIM_DRIVER_H_
