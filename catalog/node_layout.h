// How a job's ranks sit on nodes (hosts that share a fast intra-node
// fabric, e.g. 8 GPUs behind one NIC), as a pure function of each rank's node
// identity: the coordinator and every member compute the same layout from
// the same plan, so no message has to agree on it. Here, below the
// coordinator and the collectives, because both read it.
#ifndef GRADEX_CATALOG_NODE_LAYOUT_H_
#define GRADEX_CATALOG_NODE_LAYOUT_H_

#include <span>
#include <string>
#include <vector>

namespace gradex::catalog {

struct NodeLayout {
  // Per rank: its node's index (nodes numbered in the order of their lowest
  // rank) and its index among its node's ranks (in rank order).
  std::vector<int> node_of;
  std::vector<int> local_of;
  // Per node: its ranks, ascending.
  std::vector<std::vector<int>> node_ranks;

  int world() const { return static_cast<int>(node_of.size()); }
  int nodes() const { return static_cast<int>(node_ranks.size()); }
  // Ranks on every node when all nodes hold the same count, else 0.
  int ranks_per_node() const;
  // The inter-node group of local index `local`: the local-th rank of each
  // node, in node order (empty when a node has fewer ranks).
  std::vector<int> Group(int local) const;
  // "2 nodes x 4 ranks", or "3 nodes of 4, 4, 2 ranks" when uneven.
  std::string Describe() const;
};

// The layout of ranks 0..P-1 given each rank's node identity (any string;
// equal strings share a node).
NodeLayout LayoutOf(std::span<const std::string> node_of_rank);
// Every rank on one node of its own (the flat layout).
NodeLayout FlatLayout(int world);

// Why the hierarchical exchange (dense inside a node, sparse across nodes)
// does not run on `layout`, or "" when it does: it needs more than one node,
// more than one rank per node and the same rank count on every node (the
// node shards of an uneven layout would not line up across nodes).
std::string FlatReason(const NodeLayout& layout);
inline bool Hierarchical(const NodeLayout& layout) { return FlatReason(layout).empty(); }

}  // namespace gradex::catalog

#endif  // GRADEX_CATALOG_NODE_LAYOUT_H_
