// gaussiank (Shi et al. 2019, as compared in the Ok-Topk paper): topka's
// exchange (gather_sum.h) with a cheaper local selection. The threshold comes
// from a normal fit of gradient + residual: mean mu and standard deviation s
// (over the finite values), threshold t = |mu| + s * z with z = Phi^-1(1 - d/2)
// (d the density), so that a fraction d of a normal sample has |x - mu| >= s z.
// Real gradients have lighter tails than their fit, so t usually selects too
// few; the Ok-Topk paper (section 5.4) lowers it until more than 3k/4 values
// pass, as the authors' code does by halving: we halve t up to kMaxHalvings
// times while fewer than ceil(3k/4) pass, and fall back to the exact top-k if
// that is not enough. When more than the cap 2k pass, the top 2k of those are
// kept. So every rank selects between min(ceil(3k/4), nonzeros) and 2k.
#include <algorithm>
#include <cmath>

#include "collectives/algorithms/gather_sum.h"
#include "collectives/block_layout.h"
#include "collectives/phase_timer.h"

namespace gradex::collectives::algorithms {
namespace {

constexpr int kMaxHalvings = 5;

// z with P(|N(0,1)| >= z) = q, i.e. erfc(z / sqrt 2) = q, by bisection (erfc
// decreases; 100 halvings of [0, 40] are far below double resolution).
double TwoSidedNormalQuantile(double q) {
  if (q >= 1) return 0;
  double lo = 0, hi = 40;
  for (int i = 0; i < 100; ++i) {
    const double mid = 0.5 * (lo + hi);
    (std::erfc(mid / std::sqrt(2.0)) > q ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

// Entries CompactAbove(x, n, threshold) would keep: |x| >= threshold, x != 0,
// not NaN (the same magnitude-key comparison).
size_t CountAbove(const float* x, size_t n, float threshold) {
  const uint32_t lo = kernels::CompactAboveKey(threshold);
  constexpr uint32_t kInfKey = 0x7f800000u;
  size_t c = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t key = kernels::MagnitudeKey(x[i]);
    c += (key >= lo) & (key <= kInfKey);
  }
  return c;
}

struct Fit {
  double mean = 0, sd = 0;
};

// Mean and sample standard deviation from the sums of the values and their
// squares over m values.
Fit FitFromSums(double s, double q, size_t m) {
  Fit f;
  if (m == 0) return f;
  f.mean = s / m;
  if (m > 1) f.sd = std::sqrt(std::max(0.0, (q - s * f.mean) / (m - 1)));
  return f;
}

// Mean and sample standard deviation of the finite values in one pass with
// independent accumulators; the non-finite test only runs when the sums say
// there is something to skip.
Fit FitNormal(std::span<const float> x) {
  auto sums = [&](bool finite_only, double* s, double* q, size_t* m) {
    double s4[4] = {0, 0, 0, 0}, q4[4] = {0, 0, 0, 0};
    size_t count = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double v = x[i];
      if (finite_only && !std::isfinite(v)) continue;
      s4[i & 3] += v;
      q4[i & 3] += v * v;
      ++count;
    }
    *s = (s4[0] + s4[1]) + (s4[2] + s4[3]);
    *q = (q4[0] + q4[1]) + (q4[2] + q4[3]);
    *m = count;
  };
  double s = 0, q = 0;
  size_t m = 0;
  sums(false, &s, &q, &m);
  if (!std::isfinite(s) || !std::isfinite(q)) sums(true, &s, &q, &m);
  return FitFromSums(s, q, m);
}

// FitNormal of gradient + residual, with the gradient (and the momentum
// correction) added in the same pass when it is still due: the same sums in
// the same order, so the same fit. Sums that are finite mean every value is
// (a square of a float stays far below the double range), so the non-finite
// count the frame needs is 0 then, and counted exactly otherwise.
Fit FitAccumulating(LocalInput& in) {
  const kernels::Accumulate* a = in.pending();
  const std::span<float> x = in.target();
  if (a == nullptr) return FitNormal(x);
  const float* g = a->grad;
  float* u = a->velocity;
  const float mo = a->momentum;
  double s4[4] = {0, 0, 0, 0}, q4[4] = {0, 0, 0, 0};
  for (size_t i = 0; i < x.size(); ++i) {
    float add = g[i];
    if (u != nullptr) {
      add = u[i] * mo + add;  // built with -ffp-contract=off, as the kernels
      u[i] = add;
    }
    const float f = x[i] + add;
    x[i] = f;
    const double v = f;
    s4[i & 3] += v;
    q4[i & 3] += v * v;
  }
  const double s = (s4[0] + s4[1]) + (s4[2] + s4[3]);
  const double q = (q4[0] + q4[1]) + (q4[2] + q4[3]);
  if (std::isfinite(s) && std::isfinite(q)) {
    in.Fused(0);
    return FitFromSums(s, q, x.size());
  }
  size_t nonfinite = 0;
  for (float v : x) nonfinite += std::isfinite(v) ? 0 : 1;
  in.Fused(nonfinite);
  return FitNormal(x);
}

class GaussianK final : public GatherSumAlgorithm {
 public:
  std::string_view name() const override { return "gaussiank"; }
  // The model prices this rank's own selection at its observed count and every
  // other rank's at the cap 2k, an upper bound; each count is at least 3k/4
  // (when a rank has that many nonzeros), so measured bytes are at least
  // (48 + 8 * 3k/4) / (48 + 8 * 2k) > 3/8 of the model.

  absl::StatusOr<Volume> ModelVolume(int rank, int world, size_t n, const AllreduceOptions& options,
                                     const CallStats& observed) const override {
    const size_t cap = Capacity(n, options),
                 own = static_cast<size_t>(observed.Detail("local_selected"));
    return GatherVolume(rank, world, n, [&](int j) { return j == rank ? own : cap; });
  }

 protected:
  size_t Capacity(size_t n, const AllreduceOptions& options) const override {
    return std::min(n, 2 * KeepCount(options.density, n));
  }

  void Select(LocalInput& in, const AllreduceOptions& options, ResidualLedger& ledger,
              CallStats* stats, kernels::SparseVec* out) override {
    PhaseTimer t(&stats->phases.selection_s);
    SelectAbove(in, options, out);
    ledger.Selected(*out);
  }

 private:
  void SelectAbove(LocalInput& in, const AllreduceOptions& options, kernels::SparseVec* out) {
    const size_t n = in.size(), k = KeepCount(options.density, n);
    const size_t cap = Capacity(n, options), want = (3 * k + 3) / 4;
    if (k >= n) {  // the quantile is 0: every nonzero
      const std::span<float> acc = in.Accumulated();
      kernels::CompactAbove(acc.data(), n, 0.0f, 0, out);
      for (uint32_t i : out->idx) acc[i] = 0.0f;
      return;
    }
    // The fit's pass adds the gradient (one read and write of the bucket
    // fewer); every later pass reads the sum.
    const Fit fit = FitAccumulating(in);
    const std::span<float> acc = in.Accumulated();  // done by now: a no-op
    float threshold =
        static_cast<float>(std::fabs(fit.mean) + fit.sd * TwoSidedNormalQuantile(options.density));
    size_t count = CountAbove(acc.data(), n, threshold);
    for (int h = 0; h < kMaxHalvings && count < want; ++h) {
      threshold *= 0.5f;
      count = CountAbove(acc.data(), n, threshold);
    }
    if (count < want) {  // the fit is far off (e.g. an outlier inflates s)
      kernels::SelectTopKAndZero(acc.data(), n, k, 0, out);
    } else if (count > cap) {
      // The top 2k of what passes is the top 2k of everything; one radix
      // select is cheaper than compacting a large passing set first.
      kernels::SelectTopKAndZero(acc.data(), n, cap, 0, out);
    } else {
      kernels::CompactAbove(acc.data(), n, threshold, 0, out);
      for (uint32_t i : out->idx) acc[i] = 0.0f;
    }
  }
};

}  // namespace

GRADEX_REGISTER_ALGORITHM("gaussiank", [] { return std::make_unique<GaussianK>(); });

}  // namespace gradex::collectives::algorithms
