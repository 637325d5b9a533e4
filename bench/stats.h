// Aggregation of the per-rank reports of one algorithm into what is printed.
#ifndef GRADEX_BENCH_STATS_H_
#define GRADEX_BENCH_STATS_H_

#include <string>
#include <vector>

#include "bench/rank_report.h"

namespace gradex::bench {

struct AlgoSummary {
  std::string algo;
  int ranks = 0;
  int teams = 1;
  std::string skip_note;            // not run, and why
  std::vector<std::string> errors;  // "rank r: message", or a missing report
  int iters = 0;
  // Over the timed calls of the per-call time (the slowest rank's).
  double median_s = 0;
  double p90_s = 0;
  // Medians over calls of each phase, averaged over ranks.
  double selection_s = 0;
  double communication_s = 0;
  double reduction_s = 0;
  double sent_bytes_per_rank = 0;  // per call, mean over calls and ranks
  double recv_bytes_per_rank = 0;
  uint64_t result_nnz = 0;
  uint64_t result_capacity = 0;
  bool consistent = false;
  bool bounds_ok = false;
  double conservation_max_abs_err = 0;
  double conservation_rel_err = 0;  // relative to max |sum|
  bool conservation_ok = false;
  // The last call's algorithm-specific details (CallStats.details), each the
  // mean over the ranks that reported it, by name.
  std::vector<std::pair<std::string, double>> details;

  bool ran() const { return skip_note.empty() && errors.empty(); }
  bool invariants_ok() const { return consistent && bounds_ok && conservation_ok; }
};

double Median(std::vector<double> v);
// Nearest-rank percentile, q in (0, 1].
double Percentile(std::vector<double> v, double q);

// `reports` holds what arrived for this algorithm (at most one per rank).
// Conservation passes when the error is exact for integer inputs, else within
// float rounding of the sums (relative 1e-5).
AlgoSummary Summarize(const std::string& algo, int ranks, int teams,
                      const std::vector<RankAlgoReport>& reports, bool integer);

}  // namespace gradex::bench

#endif  // GRADEX_BENCH_STATS_H_
