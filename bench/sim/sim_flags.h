// Command-line flags of gradex-sim.
#ifndef GRADEX_BENCH_SIM_SIM_FLAGS_H_
#define GRADEX_BENCH_SIM_SIM_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace gradex::sim {

struct SimFlags {
  std::string algo = "all";  // a name, a comma-separated list, or "all"
  int ranks = 8;
  uint64_t elements = 25'000'000;
  double density = 0.01;
  int teams = 0;           // 0: 2 when it divides P, else 1 (team algorithms only)
  double alpha = 20e-6;    // s per message (TCP in a cloud VPC)
  double beta = 8 / 25e9;  // s per byte (25 Gbit/s)
  double gamma = 0;        // s per received 4-byte word
  // More than 1: the closed-form node model (node_model.h) instead of a run;
  // beta is then the node's NIC, shared by its ranks.
  int ranks_per_node = 1;
  double intra_alpha = 3.4e-6;    // NCCL's NVLink ring hop latency (Simple protocol)
  double intra_beta = 1 / 300e9;  // A100 NVLink, one direction (600 GB/s both ways)
  int iters = 1;
  uint64_t seed = 1;
  bool integer = false;
  bool json = false;
  double mem_gib = 12;  // memory budget; larger runs shrink N and extrapolate
  bool help = false;
};

absl::StatusOr<SimFlags> ParseSimFlags(int argc, char** argv);
std::string SimHelpText();

}  // namespace gradex::sim

#endif  // GRADEX_BENCH_SIM_SIM_FLAGS_H_
