// gradex-sim: modeled time and bytes per rank of every algorithm on up to
// 1024 simulated ranks (see sim_transport.h for the model).
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "bench/sim/node_report.h"
#include "bench/sim/sim_driver.h"
#include "bench/sim/sim_flags.h"
#include "collectives/sparse_allreduce.h"
#include "version/version.h"

int main(int argc, char** argv) {
  if (gradex::version::PrintVersionIfAsked(argc, argv, "gradex-sim")) return 0;
  using namespace gradex::sim;
  absl::StatusOr<SimFlags> flags = ParseSimFlags(argc, argv);
  if (!flags.ok()) {
    std::fprintf(stderr, "gradex-sim: %s\n", std::string(flags.status().message()).c_str());
    return 2;
  }
  if (flags->help) {
    std::fputs(SimHelpText().c_str(), stdout);
    return 0;
  }
  const std::vector<std::string> known = gradex::collectives::AllreduceNames();
  const bool node_model = flags->ranks_per_node > 1;
  std::vector<std::string> algos;
  if (flags->algo == "all") {
    algos = node_model ? NodeModelNames() : known;
  } else {
    for (absl::string_view sv : absl::StrSplit(flags->algo, ',', absl::SkipEmpty())) {
      const std::string name(sv);
      bool found = false;
      for (const std::string& k : known) found = found || k == name;
      if (!found) {
        std::string list;
        for (const std::string& k : known) list += " " + k;
        std::fprintf(stderr, "gradex-sim: unknown algorithm '%s'; registered:%s, or all\n",
                     name.c_str(), list.c_str());
        return 2;
      }
      algos.push_back(name);
    }
  }
  if (node_model) {
    const ExchangeCost nccl = NcclHierarchicalDenseCost(NetworkOf(*flags), flags->elements);
    std::vector<NodeRow> rows;
    for (const std::string& a : algos) {
      rows.push_back(ModelAlgorithm(*flags, a));
      if (flags->json) std::printf("%s\n", NodeRowJson(rows.back(), *flags, nccl).c_str());
    }
    if (flags->json) {
      std::printf("%s\n", NcclJson(nccl, *flags).c_str());
    } else {
      std::fputs(NodeTable(rows, *flags, nccl).c_str(), stdout);
    }
    return 0;
  }
  std::vector<SimRow> rows;
  bool failed = false;
  for (const std::string& a : algos) {
    rows.push_back(SimulateAlgorithm(*flags, a));
    const SimRow& r = rows.back();
    failed = failed || !r.error.empty() ||
             (r.skipped.empty() && (!r.at_n.consistent || !r.at_n.conserved));
    if (flags->json) {
      std::printf("%s\n", RowJson(r, *flags).c_str());
      std::fflush(stdout);
    }
  }
  if (!flags->json) std::fputs(RowsTable(rows, *flags).c_str(), stdout);
  return failed ? 1 : 0;
}
