// How a gradient of n elements is cut into contiguous blocks, and how many
// entries each block keeps at a density.
#ifndef GRADEX_COLLECTIVES_BLOCK_LAYOUT_H_
#define GRADEX_COLLECTIVES_BLOCK_LAYOUT_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "catalog/models.h"
#include "collectives/wire/frame.h"

namespace gradex::collectives {

// The catalog's models (shared with the coordinator and the simulator).
using catalog::CeilLog2;
using catalog::KeepCount;

class BlockLayout {
 public:
  // Blocks b = 0..parts-1 cover [b*n/parts, (b+1)*n/parts); some may be empty.
  BlockLayout(size_t n, int parts, double density) : n_(n), parts_(parts) {
    bounds_.resize(parts + 1);
    for (int b = 0; b <= parts; ++b) bounds_[b] = catalog::BlockBegin(n, parts, b);
    keep_.resize(parts);
    for (int b = 0; b < parts; ++b) keep_[b] = KeepCount(density, bounds_[b + 1] - bounds_[b]);
  }
  // The same quotas as the equal blocks, on agreed boundaries (parts + 1
  // values from 0 to n, nondecreasing): SparDL's balanced blocks.
  BlockLayout(size_t n, int parts, double density, const std::vector<size_t>& bounds)
      : BlockLayout(n, parts, density) {
    bounds_ = bounds;
  }
  int parts() const { return parts_; }
  size_t n() const { return n_; }
  wire::BlockRange range(int b) const {
    return {static_cast<uint32_t>(bounds_[b]), static_cast<uint32_t>(bounds_[b + 1])};
  }
  size_t keep(int b) const { return keep_[b]; }
  const std::vector<size_t>& bounds() const { return bounds_; }
  const std::vector<size_t>& keeps() const { return keep_; }
  size_t total_keep() const {
    size_t t = 0;
    for (size_t k : keep_) t += k;
    return t;
  }
  wire::ExpectedBlock expect(int b) const { return {range(b), static_cast<uint32_t>(keep_[b])}; }

 private:
  size_t n_;
  int parts_;
  std::vector<size_t> bounds_;
  std::vector<size_t> keep_;
};

// A subset of the ranks acting as a communicator: member j is global rank
// ranks[j]; `me` is this rank's position.
struct Group {
  std::vector<int> ranks;
  int me = 0;
  int size() const { return static_cast<int>(ranks.size()); }
  // Global rank of the member `offset` positions away (mod size).
  int at(int offset) const {
    int s = size();
    return ranks[((me + offset) % s + s) % s];
  }
};

// Teams of q = P/T consecutive ranks: team t holds ranks [t*q, (t+1)*q).
inline Group TeamGroup(int rank, int world, int teams) {
  int q = world / teams;
  Group g;
  for (int j = 0; j < q; ++j) g.ranks.push_back((rank / q) * q + j);
  g.me = rank % q;
  return g;
}

// The ranks at the same position in every team.
inline Group CrossTeamGroup(int rank, int world, int teams) {
  int q = world / teams;
  Group g;
  for (int t = 0; t < teams; ++t) g.ranks.push_back(t * q + rank % q);
  g.me = rank / q;
  return g;
}

}  // namespace gradex::collectives

#endif  // GRADEX_COLLECTIVES_BLOCK_LAYOUT_H_
