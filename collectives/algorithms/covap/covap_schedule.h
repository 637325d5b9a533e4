// COVAP's schedule (the covap seed, constants in docs/design.md): which part of
// which bucket a step sends, how large buckets are cut, and the error-feedback
// coefficient. Pure functions of the step, the interval I and the step's
// bucket sizes, which every rank knows alike: no agreement is needed.
#ifndef GRADEX_COLLECTIVES_ALGORITHMS_COVAP_COVAP_SCHEDULE_H_
#define GRADEX_COLLECTIVES_ALGORITHMS_COVAP_COVAP_SCHEDULE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace gradex::collectives::algorithms::covap {

// The median bucket size (the mean of the two middle sizes for an even count;
// 0 for no buckets).
double MedianSize(std::span<const size_t> buckets);

// Parts a bucket of `size` elements is cut into: min(int(size/median - 0.3) +
// 1, I) when that is > 1, else 1 (docs/design.md). A median of 0 cuts nothing.
int PartCount(size_t size, double median, int interval);

// Where bucket `bucket` of the step's buckets sits among the step's parts,
// counted across the buckets in order: its first part's index and its count.
struct BucketParts {
  uint64_t first = 0;
  int count = 1;
};
BucketParts PartsOf(std::span<const size_t> buckets, uint32_t bucket, int interval);

// Global part i is sent at `step` when (i + step) % I == 0.
inline bool PartSent(uint64_t part, uint64_t step, int interval) {
  return (part + step) % static_cast<uint64_t>(interval) == 0;
}

// The part of `parts` sent at `step`, or -1 when none is. A bucket has at
// most I parts, consecutive in the global count, so at most one is sent.
int SentPart(const BucketParts& parts, uint64_t step, int interval);

// Elements of part j of a bucket of n elements cut in p strided parts (part
// j holds elements j, j+p, j+2p, ...).
inline size_t PartElements(size_t n, int p, int j) {
  const size_t pp = static_cast<size_t>(p), jj = static_cast<size_t>(j);
  return jj < n ? (n - jj + pp - 1) / pp : 0;
}

// The error-feedback coefficient at `step` (the seed's scheduler,
// min(init + floor(step/ascend) * 0.1, 1)): 0.5 rising by 0.1 every 50
// steps; 0.2 rising every 100 steps when I > 8.
float Coefficient(uint64_t step, int interval);

}  // namespace gradex::collectives::algorithms::covap

#endif  // GRADEX_COLLECTIVES_ALGORITHMS_COVAP_COVAP_SCHEDULE_H_
