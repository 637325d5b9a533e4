#include "collectives/shard_quotas.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace gradex {

std::vector<size_t> BalancedShardQuotas(std::span<const kernels::SparseVec> by_shard,
                                        std::span<const size_t> quotas,
                                        std::span<const size_t> sizes) {
  std::vector<size_t> same(quotas.begin(), quotas.end());
  const size_t parts = quotas.size();
  if (parts == 0 || by_shard.size() != parts || sizes.size() != parts) return same;
  // theta: the magnitude of the result's (total quota / parts)-th largest
  // entry, what one shard's quota would take from the whole result.
  size_t total_quota = 0, entries = 0;
  for (size_t l = 0; l < parts; ++l) {
    total_quota += quotas[l];
    entries += by_shard[l].nnz();
  }
  const size_t rank = std::min(entries, std::max<size_t>(1, total_quota / parts));
  if (rank == 0) return same;
  std::vector<float> mags;
  mags.reserve(entries);
  for (size_t l = 0; l < parts; ++l) {
    for (float v : by_shard[l].val) mags.push_back(std::fabs(v));
  }
  std::nth_element(mags.begin(), mags.begin() + (rank - 1), mags.end(), std::greater<>());
  const float theta = mags[rank - 1];
  std::vector<size_t> count(parts, 0);
  size_t total_count = 0;
  for (size_t l = 0; l < parts; ++l) {
    for (float v : by_shard[l].val) count[l] += std::fabs(v) >= theta;
    total_count += count[l];
  }
  if (total_count < parts) return same;
  const size_t floor_quota = std::max<size_t>(1, total_quota / (4 * parts));
  std::vector<size_t> out(parts);
  for (size_t l = 0; l < parts; ++l) {
    const double share = static_cast<double>(total_quota) * static_cast<double>(count[l]) /
                         static_cast<double>(total_count);
    const size_t ceiling = std::max<size_t>(1, sizes[l] / 4);
    out[l] = std::min(ceiling, std::max(floor_quota, static_cast<size_t>(std::llround(share))));
  }
  return out;
}

}  // namespace gradex
