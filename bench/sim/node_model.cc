#include "bench/sim/node_model.h"

#include <algorithm>

#include "catalog/catalog.h"

namespace gradex::sim {
namespace {

constexpr double kEntryBytes = 8, kDenseBytes = 4;  // a COO entry, a dense element

// L-1 messages of `bytes` each on one rank's intra-node link: a ring step
// of the reduce-scatter, or the all-gather's sends to the node's other ranks
// (posted at once, they serialise on the link).
StageCost IntraStage(const NodeNetwork& net, double bytes_lo, double bytes_hi) {
  const double steps = net.ranks_per_node - 1;
  StageCost s;
  s.lo_s = steps * (net.intra_alpha + net.intra_beta * bytes_lo);
  s.hi_s = steps * (net.intra_alpha + net.intra_beta * bytes_hi);
  s.link_bytes_lo = steps * bytes_lo;
  s.link_bytes_hi = steps * bytes_hi;
  s.messages = steps;
  return s;
}

// A Table 1 row run by `share` ranks at once through one NIC.
StageCost InterStage(const CostRange& c, const NodeNetwork& net, int share) {
  StageCost s;
  s.lo_s = net.alpha * c.latency_lo + share * net.beta * c.bytes_lo;
  s.hi_s = net.alpha * c.latency_hi + share * net.beta * c.bytes_hi;
  s.nic_bytes_lo = share * c.bytes_lo;
  s.nic_bytes_hi = share * c.bytes_hi;
  s.messages = c.latency_hi;
  return s;
}

// Entries of one shard's result across N nodes, [lo, hi]: a dense result
// holds the shard; a sparse one at least the shard's k (what the cut
// algorithms keep) and at most the union its gather can hold
// (catalog::MemoryModel: gather_pk·N selections of k; gather_pk = 0 for the
// algorithms that cut to k), capped by the shard.
void ResultEntries(const std::string& algo, int nodes, double shard, double density, double* lo,
                   double* hi) {
  const catalog::AlgorithmSpec* spec = catalog::Find(algo);
  const double k = density * shard;
  if (spec != nullptr && (spec->traits.dense || spec->memory.dense_result)) {
    *lo = spec->traits.dense ? shard : std::min(k, shard);
    *hi = shard;
    return;
  }
  const double pk = spec != nullptr ? spec->memory.gather_pk : 1;
  *lo = std::min(k, shard);
  *hi = std::min(std::max(1.0, pk * nodes) * k, shard);
}

}  // namespace

int FlatNicShare(const std::string& algo, int ranks_per_node) {
  return algo == "dense-ring" ? 1 : ranks_per_node;
}

uint64_t ShardElements(uint64_t n, int ranks_per_node) {
  const uint64_t l = static_cast<uint64_t>(ranks_per_node);
  return (n + l - 1) / l;
}

int InterNodeTeams(int teams, int nodes) {
  return teams >= 1 && teams <= nodes && nodes % teams == 0 ? teams : 1;
}

absl::StatusOr<ExchangeCost> FlatCost(const std::string& algo, const NodeNetwork& net, uint64_t n,
                                      double density, int teams) {
  absl::StatusOr<CostRange> c = Table1Cost(algo, net.ranks(), n, density, teams);
  if (!c.ok()) return c.status();
  ExchangeCost e;
  e.inter = InterStage(*c, net, FlatNicShare(algo, net.ranks_per_node));
  return e;
}

absl::StatusOr<ExchangeCost> HierarchicalCost(const std::string& algo, const NodeNetwork& net,
                                              uint64_t n, double density, int inter_teams) {
  const uint64_t shard = ShardElements(n, net.ranks_per_node);
  absl::StatusOr<CostRange> c = Table1Cost(algo, net.nodes, shard, density, inter_teams);
  if (!c.ok()) return c.status();
  ExchangeCost e;
  const double s = static_cast<double>(shard);
  e.reduce_scatter = IntraStage(net, kDenseBytes * s, kDenseBytes * s);
  e.inter = InterStage(*c, net, net.ranks_per_node);
  double lo = 0, hi = 0;
  ResultEntries(algo, net.nodes, s, density, &lo, &hi);
  // The all-gather sends each result in the smaller of its two encodings.
  e.all_gather = IntraStage(net, std::min(kEntryBytes * lo, kDenseBytes * s),
                            std::min(kEntryBytes * hi, kDenseBytes * s));
  return e;
}

ExchangeCost NcclHierarchicalDenseCost(const NodeNetwork& net, uint64_t n) {
  const uint64_t shard = ShardElements(n, net.ranks_per_node);
  const double s = static_cast<double>(shard), nodes = net.nodes;
  ExchangeCost e;
  e.reduce_scatter = IntraStage(net, kDenseBytes * s, kDenseBytes * s);
  const double bytes = 2 * (nodes - 1) / nodes * kDenseBytes * s;
  e.inter = InterStage(CostRange{2 * (nodes - 1), 2 * (nodes - 1), bytes, bytes, ""}, net,
                       net.ranks_per_node);
  e.all_gather = IntraStage(net, kDenseBytes * s, kDenseBytes * s);
  return e;
}

}  // namespace gradex::sim
