// One rank's part of a benchmark run: for each algorithm, warmup + timed
// calls on synthetic gradients with residuals carried across calls, then the
// invariant checks and the optional dump of the last call.
#ifndef GRADEX_BENCH_RANK_RUNNER_H_
#define GRADEX_BENCH_RANK_RUNNER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench/flags.h"
#include "bench/rank_report.h"
#include "transport/transport.h"

namespace gradex::bench {

using ReportSink = std::function<void(const RankAlgoReport&)>;

// Runs `algos` in order on `transport` (every rank runs the same list, so the
// in-band barriers line up). Each algorithm's report goes to `sink` when it is
// done. Stops at the first error (the transport's state is then unknown) and
// returns it, after reporting it. `before_call`, when set, is told the step
// of every algorithm call just before it starts (a test hook).
absl::Status RunRank(const BenchFlags& flags, const std::vector<std::string>& algos,
                     transport::Transport& transport, const ReportSink& sink,
                     const std::function<void(uint64_t)>& before_call = nullptr);

}  // namespace gradex::bench

#endif  // GRADEX_BENCH_RANK_RUNNER_H_
