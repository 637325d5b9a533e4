#include "catalog/node_layout.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gradex::catalog {

int NodeLayout::ranks_per_node() const {
  if (node_ranks.empty()) return 0;
  const size_t l = node_ranks.front().size();
  for (const std::vector<int>& n : node_ranks) {
    if (n.size() != l) return 0;
  }
  return static_cast<int>(l);
}

std::vector<int> NodeLayout::Group(int local) const {
  std::vector<int> g;
  for (const std::vector<int>& n : node_ranks) {
    if (local < 0 || local >= static_cast<int>(n.size())) return {};
    g.push_back(n[local]);
  }
  return g;
}

std::string NodeLayout::Describe() const {
  const int l = ranks_per_node();
  if (l > 0) {
    return absl::StrCat(nodes(), nodes() == 1 ? " node" : " nodes", " x ", l,
                        l == 1 ? " rank" : " ranks");
  }
  std::vector<size_t> sizes;
  for (const std::vector<int>& n : node_ranks) sizes.push_back(n.size());
  return absl::StrCat(nodes(), " nodes of ", absl::StrJoin(sizes, ", "), " ranks");
}

NodeLayout LayoutOf(std::span<const std::string> node_of_rank) {
  NodeLayout layout;
  std::map<std::string, int, std::less<>> index;
  for (size_t r = 0; r < node_of_rank.size(); ++r) {
    auto [it, fresh] = index.try_emplace(node_of_rank[r], layout.nodes());
    if (fresh) layout.node_ranks.emplace_back();
    std::vector<int>& ranks = layout.node_ranks[it->second];
    layout.node_of.push_back(it->second);
    layout.local_of.push_back(static_cast<int>(ranks.size()));
    ranks.push_back(static_cast<int>(r));
  }
  return layout;
}

NodeLayout FlatLayout(int world) {
  NodeLayout layout;
  for (int r = 0; r < world; ++r) {
    layout.node_of.push_back(r);
    layout.local_of.push_back(0);
    layout.node_ranks.push_back({r});
  }
  return layout;
}

std::string FlatReason(const NodeLayout& layout) {
  if (layout.nodes() <= 1) return "one node";
  if (layout.world() == layout.nodes()) return "one rank per node";
  if (layout.ranks_per_node() == 0) return absl::StrCat("uneven nodes (", layout.Describe(), ")");
  return "";
}

}  // namespace gradex::catalog
