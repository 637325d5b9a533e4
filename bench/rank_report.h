// What one rank measured for one algorithm, and its one-line wire form (rank
// processes stream these to the launcher through a pipe).
#ifndef GRADEX_BENCH_RANK_REPORT_H_
#define GRADEX_BENCH_RANK_REPORT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace gradex::bench {

struct RankAlgoReport {
  int rank = 0;
  std::string algo;
  int teams = 1;
  std::string skip_note;  // non-empty: not run, and why
  std::string error;      // non-empty: the run failed on this rank
  // Per timed call (warmup excluded).
  std::vector<double> call_s;
  std::vector<double> selection_s;
  std::vector<double> communication_s;
  std::vector<double> reduction_s;
  std::vector<uint64_t> sent_bytes;
  std::vector<uint64_t> recv_bytes;
  // Last iteration.
  uint64_t result_nnz = 0;
  uint64_t result_capacity = 0;
  uint64_t result_hash = 0;
  bool consistent = false;
  bool bounds_ok = false;
  bool conservation_checked = false;
  double conservation_max_abs_err = 0;
  double max_abs_sum = 0;  // max |sum over ranks|, to make the error relative
  // The last call's algorithm-specific details (CallStats.details), by name.
  std::vector<std::pair<std::string, double>> details;
};

// One line, no newline inside; fields tab-separated.
std::string SerializeReport(const RankAlgoReport& r);
absl::StatusOr<RankAlgoReport> ParseReport(const std::string& line);

}  // namespace gradex::bench

#endif  // GRADEX_BENCH_RANK_REPORT_H_
