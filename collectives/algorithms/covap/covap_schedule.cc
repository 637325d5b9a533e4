#include "collectives/algorithms/covap/covap_schedule.h"

#include <algorithm>

#include "catalog/median.h"

namespace gradex::collectives::algorithms::covap {

double MedianSize(std::span<const size_t> buckets) { return catalog::Median(buckets); }

int PartCount(size_t size, double median, int interval) {
  if (!(median > 0) || interval <= 1) return 1;
  // int() truncates toward zero as the seed's Python does: a small bucket
  // (size/median < 0.3) gives int(negative) + 1 = 1, not 0.
  const double cut = static_cast<double>(size) / median - 0.3;
  if (cut >= interval) return interval;  // also keeps the cast in range
  return std::max(1, std::min(static_cast<int>(cut) + 1, interval));
}

BucketParts PartsOf(std::span<const size_t> buckets, uint32_t bucket, int interval) {
  const double median = MedianSize(buckets);
  BucketParts out;
  for (uint32_t b = 0; b < bucket && b < buckets.size(); ++b) {
    out.first += static_cast<uint64_t>(PartCount(buckets[b], median, interval));
  }
  if (bucket < buckets.size()) out.count = PartCount(buckets[bucket], median, interval);
  return out;
}

int SentPart(const BucketParts& parts, uint64_t step, int interval) {
  const uint64_t i = static_cast<uint64_t>(interval);
  const uint64_t j = (i - (parts.first + step) % i) % i;  // (first + j + step) % I == 0
  return j < static_cast<uint64_t>(parts.count) ? static_cast<int>(j) : -1;
}

float Coefficient(uint64_t step, int interval) {
  // In tenths, so that 0.5 and 1 are exact (docs/design.md's constants).
  const bool wide = interval > 8;
  const uint64_t init = wide ? 2 : 5, ascend = wide ? 100 : 50;
  const uint64_t tenths = std::min<uint64_t>(init + step / ascend, 10);
  return static_cast<float>(tenths) / 10.0f;
}

}  // namespace gradex::collectives::algorithms::covap
