// Printing summaries: one JSON object per line (--json) or a readable table.
#ifndef GRADEX_BENCH_OUTPUT_H_
#define GRADEX_BENCH_OUTPUT_H_

#include <string>
#include <vector>

#include "bench/flags.h"
#include "bench/stats.h"

namespace gradex::bench {

// nccl-tests' allreduce definitions on the dense gradient (N * 4 bytes).
double AlgBwGbps(const BenchFlags& flags, double seconds);
double BusBwGbps(const BenchFlags& flags, double seconds);

// The JSON line of one algorithm that ran (no trailing newline).
std::string JsonLine(const AlgoSummary& s, const BenchFlags& flags);

// The table of every algorithm, skipped and failed ones included.
std::string Table(const std::vector<AlgoSummary>& all, const BenchFlags& flags);

}  // namespace gradex::bench

#endif  // GRADEX_BENCH_OUTPUT_H_
