// gradex-sim with --ranks-per-node L > 1: per algorithm, the flat, the
// hierarchical and NCCL's hierarchical dense exchange of node_model.h, stage
// by stage, as a table or one JSON object per row.
#ifndef GRADEX_BENCH_SIM_NODE_REPORT_H_
#define GRADEX_BENCH_SIM_NODE_REPORT_H_

#include <string>
#include <vector>

#include "bench/sim/node_model.h"
#include "bench/sim/sim_flags.h"

namespace gradex::sim {

struct NodeRow {
  std::string algo;
  int flat_teams = 1, inter_teams = 1;
  std::string skipped;  // why there is no row (empty when there is)
  ExchangeCost flat, hier;
};

NodeNetwork NetworkOf(const SimFlags& flags);

// The algorithms a node report covers for `--algo all`: every Table 1 row
// that may be the inter-node stage (collectives/algorithms/hierarchical.h).
std::vector<std::string> NodeModelNames();

NodeRow ModelAlgorithm(const SimFlags& flags, const std::string& algo);

std::string NodeRowJson(const NodeRow& row, const SimFlags& flags, const ExchangeCost& nccl);
// The NCCL hierarchical dense exchange's own JSON object.
std::string NcclJson(const ExchangeCost& nccl, const SimFlags& flags);
std::string NodeTable(const std::vector<NodeRow>& rows, const SimFlags& flags,
                      const ExchangeCost& nccl);

}  // namespace gradex::sim

#endif  // GRADEX_BENCH_SIM_NODE_REPORT_H_
