// Runs a benchmark over P ranks: rank processes over UCX (fork/exec of this
// binary, results streamed back through a pipe each) or threads over the
// loopback transport. Both collect the same per-rank reports.
#ifndef GRADEX_BENCH_LAUNCHER_H_
#define GRADEX_BENCH_LAUNCHER_H_

#include <functional>
#include <string>
#include <vector>

#include "bench/flags.h"
#include "bench/rank_report.h"

namespace gradex::bench {

struct LaunchResult {
  std::vector<RankAlgoReport> reports;  // every report that arrived, any order
  // Ranks that failed outside an algorithm: exit status, signal, killed at the
  // deadline, bad report lines.
  std::vector<std::string> problems;
};

// Called once every rank reported `algo` (for progress lines).
using AlgoDone = std::function<void(const std::string& algo)>;

// argv: this process's command line, passed on to the ranks.
LaunchResult LaunchProcesses(const BenchFlags& flags, const std::vector<std::string>& algos,
                             int argc, char** argv, const AlgoDone& done);

LaunchResult LaunchThreads(const BenchFlags& flags, const std::vector<std::string>& algos,
                           const AlgoDone& done);

// The body of one rank process (flags.rank >= 0): connects over UCX, runs,
// writes reports to flags.report_fd. Returns the exit status.
int RankProcessMain(const BenchFlags& flags, const std::vector<std::string>& algos);

}  // namespace gradex::bench

#endif  // GRADEX_BENCH_LAUNCHER_H_
