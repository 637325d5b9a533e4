// Ok-Topk's threshold reuse: exact top-k thresholds every τ' calls, reused in
// between. The controller moves the reused threshold from call to call and
// says which selected counts are accepted; the callers fall back to an exact
// selection outside the band, so the count stays near k.
#ifndef GRADEX_COLLECTIVES_ALGORITHMS_OKTOPK_OKTOPK_THRESHOLD_H_
#define GRADEX_COLLECTIVES_ALGORITHMS_OKTOPK_OKTOPK_THRESHOLD_H_

#include <cmath>
#include <cstddef>

namespace gradex::collectives::algorithms::oktopk {

enum class ThresholdRule {
  // Ours: predicts the next threshold from this call's ideal threshold and its
  // drift; selections outside [Low(k), High(k)] are redone exactly.
  kTracking,
  // The authors' code, kept to compare against: ×1.025 / ÷1.025 per call when
  // the count leaves [4k/5, 5k/4], no exact redo in between the τ' refreshes.
  kAuthors,
};

// The band of accepted counts: [ceil(0.8k), floor(1.25k)] (the authors' band).
inline size_t BandLow(size_t k) { return static_cast<size_t>(std::ceil(0.8 * k - 1e-9)); }
inline size_t BandHigh(size_t k) {
  size_t h = static_cast<size_t>(std::floor(1.25 * k + 1e-9));
  return h < k ? k : h;
}

class ThresholdController {
 public:
  explicit ThresholdController(ThresholdRule rule) : rule_(rule) {}

  ThresholdRule rule() const { return rule_; }
  bool valid() const { return valid_; }
  // The magnitude to select at (|x| >= threshold) this call.
  float threshold() const { return th_; }

  // Records a call aiming at k. `used` > 0 when the call selected at the
  // reused threshold and found `count` entries at or above it; `exact_kth` > 0
  // when the call also knows the exact k-th largest magnitude (exact refresh
  // or fallback).
  void Observe(float used, size_t count, size_t k, float exact_kth);
  void Reset() { *this = ThresholdController(rule_); }

  double elasticity() const { return elasticity_; }

 private:
  ThresholdRule rule_;
  bool valid_ = false;
  float th_ = 0;
  // Tracking state: -d ln(count) / d ln(threshold) near the k-th value, and
  // the smoothed per-call log drift of the ideal threshold.
  double elasticity_ = 8.0;
  double drift_ = 0;
  double prev_ideal_ = 0;
};

}  // namespace gradex::collectives::algorithms::oktopk

#endif  // GRADEX_COLLECTIVES_ALGORITHMS_OKTOPK_OKTOPK_THRESHOLD_H_
