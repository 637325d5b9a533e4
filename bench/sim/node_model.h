// The closed-form node model of gradex-sim: P = N·L ranks as N nodes of L
// ranks, a fast intra-node fabric per rank (NVLink: α_i, β_i) and one NIC
// per node (α, β) that the node's L ranks share. Three exchanges of one
// bucket of n elements at density d, each as stages of α-β time over the
// Table 1 rows (cost_model.h):
//  - flat: every rank runs the algorithm across all P ranks, so the node's
//    NIC carries the L ranks' bytes at once (fair share: β·L per rank);
//  - hierarchical: a ring reduce-scatter inside the node, the algorithm
//    across the N nodes on a 1/L shard at density d (the L local ranks
//    share the NIC), and an all-gather of the shards' results inside the node;
//  - NCCL's hierarchical dense ring: the same reduce-scatter, a dense ring
//    allreduce of the shard across the N nodes, a dense ring all-gather.
// The formulas are in docs/design.md ("Hierarchical exchange (ours)").
#ifndef GRADEX_BENCH_SIM_NODE_MODEL_H_
#define GRADEX_BENCH_SIM_NODE_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/sim/cost_model.h"

namespace gradex::sim {

struct NodeNetwork {
  int nodes = 1;           // N
  int ranks_per_node = 1;  // L
  double alpha = 20e-6;    // s per message between nodes
  double beta = 8 / 25e9;  // s per byte of the node's NIC (shared by its L ranks)
  double intra_alpha = 3.4e-6;
  double intra_beta = 1 / 300e9;  // s per byte of one rank's intra-node link
  int ranks() const { return nodes * ranks_per_node; }
};

// One stage's time range (the Table 1 row's [lo, hi] where it has one) and
// the bytes it puts on one node's NIC and on one rank's intra-node link.
struct StageCost {
  double lo_s = 0, hi_s = 0;
  double nic_bytes_lo = 0, nic_bytes_hi = 0;    // per node, inter-node
  double link_bytes_lo = 0, link_bytes_hi = 0;  // per rank, intra-node
  double messages = 0;                          // on the stage's critical path (the row's top)
};

struct ExchangeCost {
  StageCost reduce_scatter;  // inside the node (zero for flat)
  StageCost inter;           // across nodes
  StageCost all_gather;      // inside the node (zero for flat)
  double lo_s() const { return reduce_scatter.lo_s + inter.lo_s + all_gather.lo_s; }
  double hi_s() const { return reduce_scatter.hi_s + inter.hi_s + all_gather.hi_s; }
};

// How many ranks' bytes share a node's NIC when `algo` runs flat over P
// ranks placed node by node: 1 for dense-ring (ring neighbours sit on the
// same node but one), L for the rest, whose schedules (butterflies, Bruck
// gathers, direct exchanges) send their bulk to peers on other nodes; their
// bytes to the node's own ranks, at most (L-1)/(P-1) of them, are counted
// on the NIC too.
int FlatNicShare(const std::string& algo, int ranks_per_node);

// The largest of the L shards of n elements (the critical path's).
uint64_t ShardElements(uint64_t n, int ranks_per_node);

// Teams of the inter-node stage: `teams` where it divides N, else 1 (as
// collectives/algorithms/hierarchical.h's InterNodeOptions).
int InterNodeTeams(int teams, int nodes);

// The exchanges; NOT_FOUND for an algorithm without a Table 1 row.
absl::StatusOr<ExchangeCost> FlatCost(const std::string& algo, const NodeNetwork& net, uint64_t n,
                                      double density, int teams);
absl::StatusOr<ExchangeCost> HierarchicalCost(const std::string& algo, const NodeNetwork& net,
                                              uint64_t n, double density, int inter_teams);
ExchangeCost NcclHierarchicalDenseCost(const NodeNetwork& net, uint64_t n);

}  // namespace gradex::sim

#endif  // GRADEX_BENCH_SIM_NODE_MODEL_H_
