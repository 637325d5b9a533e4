// gradex-bench: benchmark and invariant checker of the sparse allreduce
// algorithms, across rank processes over UCX or threads over loopback.
#include <cstdio>
#include <string>
#include <vector>

#include "bench/flags.h"
#include "bench/launcher.h"
#include "bench/output.h"
#include "bench/stats.h"
#include "collectives/sparse_allreduce.h"
#include "version/version.h"

namespace gradex::bench {
namespace {

int Main(int argc, char** argv) {
  auto parsed = ParseFlags(argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "gradex-bench: %s\nRun 'gradex-bench --help' for the flags.\n",
                 std::string(parsed.status().message()).c_str());
    return 2;
  }
  const BenchFlags& flags = *parsed;
  if (flags.help) {
    std::fputs(HelpText().c_str(), stdout);
    return 0;
  }
  const std::vector<std::string> known = collectives::AllreduceNames();
  auto algos = ResolveAlgorithms(flags.algo, known);
  if (!algos.ok()) {
    std::fprintf(stderr, "gradex-bench: %s\n", std::string(algos.status().message()).c_str());
    return 2;
  }
  if (flags.rank >= 0) return RankProcessMain(flags, *algos);

  auto done = [&](const std::string& algo) {
    if (!flags.quiet) std::fprintf(stderr, "[gradex-bench] %s: done\n", algo.c_str());
  };
  LaunchResult launch = flags.transport == "ucx" ? LaunchProcesses(flags, *algos, argc, argv, done)
                                                 : LaunchThreads(flags, *algos, done);

  std::vector<AlgoSummary> summaries;
  for (const auto& algo : *algos) {
    std::vector<RankAlgoReport> mine;
    for (const auto& r : launch.reports) {
      if (r.algo == algo) mine.push_back(r);
    }
    summaries.push_back(Summarize(algo, flags.ranks, TeamsFor(algo, flags), mine, flags.integer));
  }

  bool failed = !launch.problems.empty();
  bool invariant_failed = false;
  for (const auto& s : summaries) {
    failed = failed || !s.errors.empty();
    invariant_failed = invariant_failed || (s.ran() && !s.invariants_ok());
  }
  if (!flags.json_out.empty()) {
    std::FILE* f = std::fopen(flags.json_out.c_str(), "a");
    if (!f) {
      std::fprintf(stderr, "gradex-bench: cannot open --json-out %s\n", flags.json_out.c_str());
      failed = true;
    } else {
      for (const auto& s : summaries) {
        if (s.ran()) std::fprintf(f, "%s\n", JsonLine(s, flags).c_str());
      }
      std::fclose(f);
    }
  }
  if (flags.json) {
    for (const auto& s : summaries) {
      if (s.ran()) {
        std::printf("%s\n", JsonLine(s, flags).c_str());
      } else if (!s.skip_note.empty()) {
        std::fprintf(stderr, "gradex-bench: %s: %s\n", s.algo.c_str(), s.skip_note.c_str());
      } else {
        for (const auto& e : s.errors) {
          std::fprintf(stderr, "gradex-bench: %s: %s\n", s.algo.c_str(), e.c_str());
        }
      }
    }
  } else {
    std::fputs(Table(summaries, flags).c_str(), stdout);
  }
  std::fflush(stdout);
  for (const auto& p : launch.problems) std::fprintf(stderr, "gradex-bench: %s\n", p.c_str());
  if (failed) return 1;
  if (invariant_failed) return 3;
  return 0;
}

}  // namespace
}  // namespace gradex::bench

int main(int argc, char** argv) {
  if (gradex::version::PrintVersionIfAsked(argc, argv, "gradex-bench")) return 0;
  return gradex::bench::Main(argc, argv);
}
