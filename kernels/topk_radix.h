// Internal to kernels/: the stages of the CPU radix select (the threshold in
// topk_threshold.cc, the selection in topk_select.cc), so that the step
// kernels (topk_step.cc) can fuse work into its first pass.
#ifndef GRADEX_KERNELS_TOPK_RADIX_H_
#define GRADEX_KERNELS_TOPK_RADIX_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/sparse.h"
#include "kernels/topk_step.h"

namespace gradex::kernels::internal {

// Pass-1 buckets: b(key) = (key + 2^20 - 1) >> 20 (0 holds the zeros, NaN
// lands above +Inf's 2040).
inline constexpr size_t kBuckets1 = 2049;
// The bucket of +Inf (shared with finite magnitudes above 3.19e38).
inline constexpr size_t kInfBucket1 = 2040;
inline constexpr int kShift1 = 20;

// The keys of pass-1 bucket b >= 1: [BucketLo(b), BucketHi(b)].
inline uint32_t BucketLo(size_t b) { return ((static_cast<uint32_t>(b) - 1) << kShift1) + 1; }
inline uint32_t BucketHi(size_t b) { return static_cast<uint32_t>(b) << kShift1; }

inline uint32_t KeyAt(const float* x, size_t i) {
  uint32_t b;
  std::memcpy(&b, x + i, sizeof b);
  return b & 0x7fffffffu;
}

// Candidates beyond this share of n (and this count) are not gathered or
// compacted as a superset, but selected by passes straight over x.
inline bool GatherCandidates(size_t candidates, size_t n) {
  return candidates <= (size_t{1} << 16) || candidates <= n / 8;
}

// Where pass 1 puts the k-th largest nonzero, non-NaN entry.
struct Pass1 {
  size_t bucket = 0;  // 0: nothing to select
  size_t above = 0;   // entries in buckets above
  size_t need = 0;    // entries still to take from `bucket`, 1..h[bucket]
  size_t in_bucket = 0;
};

// Pass 1 over all of x (no accumulation): where the k-th entry falls.
Pass1 LocateBucket(const float* x, size_t n, size_t k);

// Passes 2 and 3 over the m candidate keys of one pass-1 bucket (all in
// [lo, lo + 2^20)): the key of the need-th largest, reordering keys; *take
// ties at it are kept, *above candidates are larger.
uint32_t SelectAmongCandidates(uint32_t* keys, size_t m, uint32_t lo, size_t need, size_t* take,
                               size_t* above);

// Completes a pass-1 result into a threshold (passes 2 and 3).
TopKThreshold Refine(const float* x, size_t n, const Pass1& p);

// The pass-1 histogram of x (kBuckets1 counts into h); when `a` is non-null,
// accumulates it into x in the same pass, before counting.
void Histogram1(float* x, size_t n, const Accumulate* a, size_t* h);

// The bucket of the k-th entry from a pass-1 histogram (k > 0).
Pass1 LocateInHistogram(const size_t* h, size_t k);

// The rest of SelectTopK after pass 1: appends the selection to out and
// zeroes it in x when `zero`. Returns the count appended.
size_t SelectFromPass1(float* x, size_t n, const Pass1& p, uint32_t index_base, SparseVec* out,
                       bool zero);

}  // namespace gradex::kernels::internal

#endif  // GRADEX_KERNELS_TOPK_RADIX_H_
