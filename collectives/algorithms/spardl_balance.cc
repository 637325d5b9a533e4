#include "collectives/algorithms/spardl_balance.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace gradex::collectives::algorithms {

std::vector<size_t> BalancedBounds(const kernels::SparseVec& result,
                                   const std::vector<size_t>& bounds,
                                   const std::vector<size_t>& keeps) {
  const size_t parts = keeps.size();
  if (parts < 2 || bounds.size() != parts + 1) return bounds;
  const size_t n = bounds.back();
  // Per block: how many entries it kept and the smallest magnitude among them.
  std::vector<size_t> count(parts, 0);
  std::vector<float> smallest(parts, std::numeric_limits<float>::infinity());
  size_t b = 0;
  for (size_t i = 0; i < result.nnz(); ++i) {
    while (b + 1 < parts && result.idx[i] >= bounds[b + 1]) ++b;
    ++count[b];
    smallest[b] = std::min(smallest[b], std::fabs(result.val[i]));
  }
  float theta = -1;
  for (size_t j = 0; j < parts; ++j) {
    if (keeps[j] > 0 && count[j] >= keeps[j]) theta = std::max(theta, smallest[j]);
  }
  if (theta < 0) return bounds;  // no block was full: its quota is not what binds
  std::vector<uint32_t> top;
  for (size_t i = 0; i < result.nnz(); ++i) {
    if (std::fabs(result.val[i]) >= theta) top.push_back(result.idx[i]);
  }
  if (top.size() < parts) return bounds;
  std::vector<size_t> next(parts + 1);
  next[0] = 0;
  next[parts] = n;
  for (size_t j = 1; j < parts; ++j) next[j] = top[j * top.size() / parts];
  // Every block spans at least kMinBlockPerKeep times its quota: forward,
  // then backward from n.
  std::vector<size_t> least(parts);
  size_t total = 0;
  for (size_t j = 0; j < parts; ++j) total += least[j] = kMinBlockPerKeep * keeps[j];
  if (total > n) return bounds;
  for (size_t j = 1; j < parts; ++j) next[j] = std::max(next[j], next[j - 1] + least[j - 1]);
  for (size_t j = parts - 1; j >= 1; --j) next[j] = std::min(next[j], next[j + 1] - least[j]);
  return next;
}

}  // namespace gradex::collectives::algorithms
