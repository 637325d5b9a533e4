// One error-feedback step of a dense bucket in as few passes over it as the
// answer needs: the accumulation `x += grad` (or DGC's momentum correction)
// fused into the first selection pass, and the previous step's threshold
// reused to gather the candidates in that same pass. The selection is exactly
// SelectTopK's (kernels/sparse.h), bit for bit; only the work differs.
#ifndef GRADEX_KERNELS_TOPK_STEP_H_
#define GRADEX_KERNELS_TOPK_STEP_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/sparse.h"

namespace gradex::kernels {

// What is added into x before selecting. Without a velocity: x[i] += grad[i].
// With one (DGC's momentum correction, as python/gradex/torch.py does it with
// `u.mul_(m).add_(g)` and the client's `residual += u`):
//   velocity[i] = velocity[i] * momentum + grad[i];  x[i] += velocity[i];
// each operation rounded to float32, no fused multiply-add. The first step's
// velocity (torch.py seeds it with a copy of g) is the caller's.
struct Accumulate {
  const float* grad = nullptr;
  float* velocity = nullptr;
  float momentum = 0.0f;
};

// The unfused accumulation, the same arithmetic as the fused kernels.
void AccumulateInto(float* x, size_t n, const Accumulate& a);

// Per-bucket state of threshold reuse, kept by the caller between steps of
// the same bucket (its length may change between steps). The prediction is
// the last step's k-th magnitude key; one pass gathers every entry with a key
// at least `margin` below it. When that holds at least k entries (and not far
// too many), the exact k-th is found among them; otherwise (a miss) the full
// select runs on the accumulated x.
struct ThresholdReuse {
  uint32_t last_key = 0;         // last step's threshold key; 0: no prediction
  int32_t drift[2] = {0, 0};     // the last two changes of it (newest first)
  uint32_t margin = 1u << 21;    // in key units: 2^23 is a factor of 2 in |x|
  uint64_t steps = 0;            // calls with k > 0 and n > 0
  uint64_t hits = 0;             // steps finished among the candidates
  uint64_t misses_few = 0;       // fewer than k candidates: full select
  uint64_t misses_many = 0;      // more than the candidate cap: full select
  uint64_t last_candidates = 0;  // candidates gathered by the last try
  uint64_t misses() const { return misses_few + misses_many; }
};

// Margins stay within these (key units).
inline constexpr uint32_t kMinReuseMargin = 1u << 17;
inline constexpr uint32_t kMaxReuseMargin = 1u << 25;

// Most candidates a reuse try gathers before it counts as a miss.
inline size_t ReuseCandidateCap(size_t k, size_t n) {
  const size_t cap = 8 * k + 4096;
  return cap < n ? cap : n;
}

// The predicted threshold key: the last one, moved by the smaller of the last
// two changes when both went the same way (a residual still growing or
// shrinking); an alternating one is not extrapolated.
uint32_t PredictKey(const ThresholdReuse& r);

// The candidate floor a reuse try uses: the prediction less the margin, never
// below 1 (zeros are never candidates).
inline uint32_t ReuseFloor(const ThresholdReuse& r) {
  const uint32_t p = PredictKey(r);
  return p > r.margin ? p - r.margin : 1u;
}

// After a step: the new prediction and margin. `candidates` is what a try
// gathered when `tried` (0 otherwise).
void UpdateReuse(ThresholdReuse* r, uint32_t threshold_key, bool tried, size_t candidates,
                 size_t k);

// A selection that made no reuse try (a device queue selects without one:
// the try's candidate count would cost a host round trip) still moves the
// prediction: its threshold is the smallest key among the entries appended
// to out since `from`. Counts a step where n > 0 and k > 0, as a try would.
void NoteSelection(ThresholdReuse* r, const SparseVec& out, size_t from, size_t n, size_t k);

// Optionally accumulates `acc` into x (acc may be null), then appends the
// top-k of x to out exactly as SelectTopK does and, when zero_selected, zeroes
// the selected entries of x. `reuse` (may be null) turns threshold reuse on.
// When it accumulates and `nonfinite` is non-null, adds to it the number of
// NaN and infinite entries of x after the accumulation (before the zeroing):
// the call frame's residual rule needs it, and the fused pass finds it
// without a pass of its own. Returns the count appended.
size_t SelectTopKStep(float* x, size_t n, size_t k, uint32_t index_base, const Accumulate* acc,
                      ThresholdReuse* reuse, bool zero_selected, SparseVec* out,
                      size_t* nonfinite = nullptr);

// CompactAbove (kernels/sparse.h: |x| >= threshold and x != 0; threshold
// <= 0: every nonzero; NaN threshold: none; NaN entries never) with `acc`
// (may be null) accumulated into x in the same pass: Ok-Topk's local
// selection at its reused threshold. Appends the entries to out when there
// are at most `cap` of them and returns their count; a larger count leaves
// out as it was (x is accumulated all the same, so the caller compacts the
// plain way). `nonfinite` as SelectTopKStep's.
size_t CompactAboveStep(float* x, size_t n, const Accumulate* acc, float threshold,
                        uint32_t index_base, size_t cap, SparseVec* out,
                        size_t* nonfinite = nullptr);

// BlockTopK (kernels/sparse.h) as steps: block b = x[bounds[b], bounds[b+1])
// accumulates its span of `acc` (indexed like x; may be null) and keeps k[b]
// into (*out)[b], through SelectTopKStep. `reuse` (may be null) holds one
// state per block and is resized to the block count. Entries outside the
// blocks are not accumulated. `nonfinite` as SelectTopKStep's, summed over
// the blocks.
void BlockTopKStep(float* x, const std::vector<size_t>& bounds, const std::vector<size_t>& k,
                   uint32_t index_base, const Accumulate* acc, std::vector<ThresholdReuse>* reuse,
                   bool zero_selected, std::vector<SparseVec>* out, size_t* nonfinite = nullptr);

}  // namespace gradex::kernels

#endif  // GRADEX_KERNELS_TOPK_STEP_H_
