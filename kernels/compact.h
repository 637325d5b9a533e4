// Internal to kernels/: the branch-light scans shared by the top-k and COO
// kernels. Everything works on magnitude keys (MagnitudeKey), so a range of
// keys is a range of |x|; keys above kInfKey are NaNs.
#ifndef GRADEX_KERNELS_COMPACT_H_
#define GRADEX_KERNELS_COMPACT_H_

#include <cstddef>
#include <cstdint>

#include "kernels/topk_step.h"

namespace gradex::kernels::internal {

inline constexpr uint32_t kInfKey = 0x7f800000u;
// Compaction writes whole 16-entry groups and advances by the hits, so its
// outputs need this many spare slots past the last entry written.
inline constexpr size_t kCompactSlack = 16;

// Writes (index_base + i, x[i]) for every i with lo <= key(x[i]) <= hi, in
// index order, to oi/ov, which have room for max_out + kCompactSlack entries.
// Stops after max_out entries (a bound the caller knows, kept so that a wrong
// one cannot overrun the buffers). Returns the count.
size_t CompactKeyRange(const float* x, size_t n, uint32_t lo, uint32_t hi, uint32_t index_base,
                       size_t max_out, uint32_t* oi, float* ov);

// Same, but of the entries whose key equals lo only the first `ties` are kept.
size_t CompactKeyRangeTies(const float* x, size_t n, uint32_t lo, uint32_t hi, size_t ties,
                           uint32_t index_base, size_t max_out, uint32_t* oi, float* ov);

// Number of entries with lo <= key <= hi.
size_t CountKeyRange(const float* x, size_t n, uint32_t lo, uint32_t hi);

// Writes the keys in [lo, hi] (index order) to keys (room for max_out +
// kCompactSlack). Returns the count.
size_t GatherKeysInRange(const float* x, size_t n, uint32_t lo, uint32_t hi, size_t max_out,
                         uint32_t* keys);

// Applies `a` to x[i, i + len) (grad and velocity indexed alike); a plain
// loop over float32 so that it vectorises and rounds as AccumulateInto.
inline void AccumulateSpan(float* x, size_t i, size_t len, const Accumulate& a) {
  const float* g = a.grad + i;
  float* xi = x + i;
  if (a.velocity == nullptr) {
    for (size_t j = 0; j < len; ++j) xi[j] = xi[j] + g[j];
    return;
  }
  float* u = a.velocity + i;
  const float m = a.momentum;
  for (size_t j = 0; j < len; ++j) {
    const float v = u[j] * m + g[j];
    u[j] = v;
    xi[j] = xi[j] + v;
  }
}

// Accumulates `a` into all of x (a may be null: none), and in the same pass
// compacts the entries with lo <= key <= hi as CompactKeyRange does, writing
// at most max_out (+ kCompactSlack of room) but counting all. Returns the
// full count; only when it is <= max_out are oi/ov complete. `nonfinite`
// (may be null) gets the number of NaN and infinite entries of x after the
// pass added to it.
size_t AccumulateCompactKeyRange(float* x, size_t n, const Accumulate* a, uint32_t lo, uint32_t hi,
                                 uint32_t index_base, size_t max_out, uint32_t* oi, float* ov,
                                 size_t* nonfinite = nullptr);

}  // namespace gradex::kernels::internal

#endif  // GRADEX_KERNELS_COMPACT_H_
