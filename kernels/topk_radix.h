// Internal to kernels/: the stages of the CPU radix select (topk_select.cc),
// so that the step kernels (topk_step.cc) can fuse work into its first pass.
#ifndef GRADEX_KERNELS_TOPK_RADIX_H_
#define GRADEX_KERNELS_TOPK_RADIX_H_

#include <cstddef>
#include <cstdint>

#include "kernels/sparse.h"
#include "kernels/topk_step.h"

namespace gradex::kernels::internal {

// Pass-1 buckets: b(key) = (key + 2^20 - 1) >> 20 (0 holds the zeros, NaN
// lands above +Inf's 2040).
inline constexpr size_t kBuckets1 = 2049;
// The bucket of +Inf (shared with finite magnitudes above 3.19e38).
inline constexpr size_t kInfBucket1 = 2040;

// Where pass 1 puts the k-th largest nonzero, non-NaN entry.
struct Pass1 {
  size_t bucket = 0;  // 0: nothing to select
  size_t above = 0;   // entries in buckets above
  size_t need = 0;    // entries still to take from `bucket`, 1..h[bucket]
  size_t in_bucket = 0;
};

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
