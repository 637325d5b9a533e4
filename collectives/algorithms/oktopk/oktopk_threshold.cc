#include "collectives/algorithms/oktopk/oktopk_threshold.h"

#include <algorithm>

namespace gradex::collectives::algorithms::oktopk {
namespace {

constexpr double kAuthorsNudge = 1.025;
// A growing residual widens the distribution by a few percent per call; the
// drift term follows that, bounded so that one odd call cannot throw it far.
constexpr double kMaxLogDrift = 0.2231435513142097;  // ln 1.25
// Half of the observed error is corrected per call: a call that selects too
// many thins the tail the next call sees (and the reverse), so correcting all
// of it overshoots into a period-2 oscillation.
constexpr double kGain = 0.5;

}  // namespace

void ThresholdController::Observe(float used, size_t count, size_t k, float exact_kth) {
  if (k == 0) return;
  if (rule_ == ThresholdRule::kAuthors) {
    if (exact_kth > 0) {
      th_ = exact_kth;
    } else if (used > 0) {
      th_ = used;
      if (count > BandHigh(k)) th_ = static_cast<float>(used * kAuthorsNudge);
      if (count < BandLow(k)) th_ = static_cast<float>(used / kAuthorsNudge);
    }
    valid_ = th_ > 0;
    return;
  }
  // The threshold that would have selected k this call: exact when known,
  // else corrected from the observed count ratio with the elasticity.
  double ideal;
  const bool counted = used > 0 && count > 0;
  if (exact_kth > 0) {
    ideal = exact_kth;
    if (counted && valid_) {
      const double dt = std::log(used / ideal);
      if (std::abs(dt) > 1e-3) {
        const double e = -std::log(static_cast<double>(count) / k) / dt;
        if (std::isfinite(e) && e > 0)
          elasticity_ = std::clamp(0.5 * elasticity_ + 0.5 * e, 1.0, 20.0);
      }
    }
  } else if (counted) {
    ideal = used * std::pow(static_cast<double>(count) / k, kGain / elasticity_);
  } else if (used > 0) {
    ideal = used * 0.5;  // nothing at or above it: far too high
  } else {
    return;
  }
  if (!(ideal > 0) || !std::isfinite(ideal)) return;
  if (prev_ideal_ > 0) {
    const double step = std::clamp(std::log(ideal / prev_ideal_), -kMaxLogDrift, kMaxLogDrift);
    drift_ = 0.75 * drift_ + 0.25 * step;
  }
  prev_ideal_ = ideal;
  th_ = static_cast<float>(ideal * std::exp(drift_));
  valid_ = th_ > 0 && std::isfinite(th_);
}

}  // namespace gradex::collectives::algorithms::oktopk
