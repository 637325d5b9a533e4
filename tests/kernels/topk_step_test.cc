// The step kernels (accumulation fused into the select, threshold reuse)
// against accumulate-then-SelectTopK, bit for bit: selection, residual and
// velocity.
#include "kernels/topk_step.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/compact.h"
#include "kernels/sparse.h"
#include "tests/kernels/reference.h"

namespace gradex::kernels {
namespace {

using testing::AllDists;
using testing::Bits;
using testing::Dist;
using testing::Make;
using testing::Name;
using testing::RefTopK;
using testing::SameBits;

// Bitwise, except that any NaN equals any NaN: which operand's payload a
// NaN + NaN keeps depends on how the compiler ordered a vectorised add, and
// NaN is never selected, so only its being NaN matters.
bool SameFloats(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (Bits(a[i]) != Bits(b[i])) return false;
  }
  return true;
}

// Today's path: the accumulation as its own pass (written out here, one
// rounding per operation), then SelectTopK / SelectTopKAndZero.
struct Unfused {
  std::vector<float> x, u;
  size_t nonfinite = 0;  // NaN and Inf entries of x after the last accumulation
  SparseVec Step(const std::vector<float>& g, bool momentum, float m, size_t k, uint32_t base,
                 bool zero) {
    for (size_t i = 0; i < x.size(); ++i) {
      float add = g[i];
      if (momentum) {
        const float mu = u[i] * m;
        u[i] = mu + g[i];
        add = u[i];
      }
      x[i] = x[i] + add;
    }
    nonfinite = 0;
    for (float v : x) nonfinite += std::isfinite(v) ? 0 : 1;
    SparseVec out;
    if (zero) {
      SelectTopKAndZero(x.data(), x.size(), k, base, &out);
    } else {
      SelectTopK(x.data(), x.size(), k, base, &out);
    }
    return out;
  }
};

std::string Where(const std::string& what, size_t n, size_t k, int step = -1) {
  return what + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
         (step >= 0 ? " step=" + std::to_string(step) : "");
}

TEST(AccumulateInto, RoundsEachOperation) {
  std::vector<float> x = {1.0f, 1e8f, -3.0f}, u = {0.5f, 1.0f, 3.0f};
  const std::vector<float> g = {0.25f, 1.0f, -1e-8f};
  Accumulate a{g.data(), u.data(), 0.9f};
  AccumulateInto(x.data(), x.size(), a);
  for (size_t i = 0; i < 3; ++i) {
    std::vector<float> x0 = {1.0f, 1e8f, -3.0f}, u0 = {0.5f, 1.0f, 3.0f};
    const float mu = u0[i] * 0.9f;
    const float v = mu + g[i];
    EXPECT_EQ(Bits(u[i]), Bits(v)) << i;
    EXPECT_EQ(Bits(x[i]), Bits(x0[i] + v)) << i;
  }
}

TEST(AccumulateCompactKeyRange, CountsPastTheCapAndAccumulatesAll) {
  const size_t n = 1000;
  std::vector<float> x(n, 0.0f), g(n, 1.0f);
  std::vector<uint32_t> oi(10 + internal::kCompactSlack);
  std::vector<float> ov(10 + internal::kCompactSlack);
  Accumulate a{g.data()};
  const size_t c = internal::AccumulateCompactKeyRange(x.data(), n, &a, 1, internal::kInfKey, 7, 10,
                                                       oi.data(), ov.data());
  EXPECT_EQ(c, n);
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(oi[i], 7 + i);
  for (float v : x) ASSERT_EQ(v, 1.0f);
}

// The fused select equals accumulate-then-select on every distribution and
// size of the sweep, with and without momentum and zeroing.
TEST(SelectTopKStep, FusedMatchesAccumulateThenSelect) {
  for (Dist d : AllDists()) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{17}, size_t{1000}, size_t{4099}, size_t{70001}}) {
      const std::vector<float> x0 = Make(d, n, static_cast<uint32_t>(n + 1));
      const std::vector<float> g = Make(d, n, static_cast<uint32_t>(n + 2));
      const std::vector<float> u0 = Make(Dist::kGauss, n, static_cast<uint32_t>(n + 3));
      for (size_t k : {size_t{0}, size_t{1}, n / 100, n / 3, n, n + 5}) {
        for (int mode = 0; mode < 4; ++mode) {
          const bool momentum = mode & 1, zero = mode & 2;
          Unfused ref{x0, u0};
          const SparseVec want = ref.Step(g, momentum, 0.9f, k, 3, zero);
          std::vector<float> x = x0, u = u0;
          Accumulate a{g.data(), momentum ? u.data() : nullptr, 0.9f};
          SparseVec got;
          size_t bad = 0;
          const size_t c = SelectTopKStep(x.data(), n, k, 3, &a, nullptr, zero, &got, &bad);
          const std::string w = Where(Name(d), n, k) + " mode=" + std::to_string(mode);
          ASSERT_EQ(c, want.nnz()) << w;
          ASSERT_EQ(bad, ref.nonfinite) << w;
          ASSERT_TRUE(SameBits(got, want)) << w;
          ASSERT_TRUE(SameFloats(x, ref.x)) << w;
          ASSERT_TRUE(SameFloats(u, ref.u)) << w;
        }
      }
    }
  }
}

// Runs `steps` error-feedback steps with reuse and without (today's path)
// over the given gradients; every step must agree bit for bit.
void RunSteps(const std::vector<std::vector<float>>& grads, size_t k, bool momentum,
              ThresholdReuse* reuse, const std::string& what) {
  const size_t n = grads.empty() ? 0 : grads[0].size();
  Unfused ref{std::vector<float>(n, 0.0f), std::vector<float>(n, 0.0f)};
  std::vector<float> x(n, 0.0f), u(n, 0.0f);
  for (size_t s = 0; s < grads.size(); ++s) {
    ASSERT_EQ(grads[s].size(), n);
    const SparseVec want = ref.Step(grads[s], momentum, 0.5f, k, 11, true);
    Accumulate a{grads[s].data(), momentum ? u.data() : nullptr, 0.5f};
    SparseVec got;
    size_t bad = 0;
    const size_t c = SelectTopKStep(x.data(), n, k, 11, &a, reuse, true, &got, &bad);
    ASSERT_EQ(c, want.nnz()) << Where(what, n, k, static_cast<int>(s));
    ASSERT_EQ(bad, ref.nonfinite) << Where(what, n, k, static_cast<int>(s));
    ASSERT_TRUE(SameBits(got, want)) << Where(what, n, k, static_cast<int>(s));
    ASSERT_TRUE(SameFloats(x, ref.x)) << Where(what, n, k, static_cast<int>(s));
    ASSERT_TRUE(SameFloats(u, ref.u)) << Where(what, n, k, static_cast<int>(s));
  }
}

std::vector<std::vector<float>> Grads(Dist d, size_t n, int steps, uint32_t seed) {
  std::vector<std::vector<float>> g;
  for (int s = 0; s < steps; ++s) g.push_back(Make(d, n, seed + static_cast<uint32_t>(s)));
  return g;
}

TEST(SelectTopKStep, ReuseMatchesOnEveryDistribution) {
  for (Dist d : AllDists()) {
    uint64_t hits = 0;
    for (size_t n : {size_t{1}, size_t{33}, size_t{4099}, size_t{100003}}) {
      for (size_t k : {size_t{1}, n / 100 + 1, n / 10, n}) {
        for (bool momentum : {false, true}) {
          ThresholdReuse r;
          RunSteps(Grads(d, n, 6, 100), k, momentum, &r, Name(d));
          ASSERT_EQ(r.steps, k == 0 ? 0u : 6u);
          ASSERT_LE(r.hits + r.misses(), r.steps - 1)  // the first step has no prediction
              << Where(Name(d), n, k);
          hits += r.hits;
        }
      }
    }
    EXPECT_GT(hits, 0u) << Name(d) << ": the reuse path never ran";
  }
}

// A steady gaussian gradient: after the first step the prediction should hit.
TEST(SelectTopKStep, ReuseHitsOnASteadyGradient) {
  const size_t n = 200000;
  for (size_t k : {size_t{200}, size_t{2000}}) {
    ThresholdReuse r;
    RunSteps(Grads(Dist::kGauss, n, 10, 7), k, false, &r, "steady");
    EXPECT_EQ(r.steps, 10u);
    EXPECT_GE(r.hits, 7u) << "misses_few=" << r.misses_few << " many=" << r.misses_many;
    EXPECT_GT(r.last_candidates, k);
  }
}

std::vector<float> Scaled(std::vector<float> v, float s) {
  for (float& f : v) f *= s;
  return v;
}

TEST(SelectTopKStep, MagnitudesJumping1000xMissAndStayExact) {
  const size_t n = 50000, k = 500;
  const std::vector<float> base = Make(Dist::kGauss, n, 3);
  // Up 1000x, then (the residual is now 1000x) a step that leaves it there,
  // then gradients 1000x smaller than the residual's.
  std::vector<std::vector<float>> g = {base, Scaled(base, 1.25f), Scaled(base, 1000.0f),
                                       Scaled(base, 1000.0f), Scaled(base, 1e-3f)};
  ThresholdReuse r;
  RunSteps(g, k, false, &r, "jump-up");
  EXPECT_GE(r.misses_many, 1u);
}

TEST(SelectTopKStep, DownJumpCountsAFewMiss) {
  const size_t n = 50000, k = 500;
  const std::vector<float> base = Make(Dist::kGauss, n, 5);
  ThresholdReuse r;
  // Without zeroing the previous selection the residual keeps growing; here
  // each step's x is replaced: use select-only calls on fresh data.
  std::vector<float> x = base;
  SparseVec out;
  SelectTopKStep(x.data(), n, k, 0, nullptr, &r, false, &out);
  std::vector<float> y = Scaled(base, 1e-3f);
  SparseVec got;
  SelectTopKStep(y.data(), n, k, 0, nullptr, &r, false, &got);
  EXPECT_EQ(r.misses_few, 1u);
  EXPECT_TRUE(SameBits(got, RefTopK(y.data(), n, k, 0)));
  // And up again: far too many candidates.
  SparseVec up;
  SelectTopKStep(x.data(), n, k, 0, nullptr, &r, false, &up);
  EXPECT_EQ(r.misses_many, 1u);
  EXPECT_TRUE(SameBits(up, RefTopK(x.data(), n, k, 0)));
}

TEST(SelectTopKStep, AllEqualMagnitudesTieToLowerIndex) {
  const size_t n = 10007;
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = i % 3 ? 0.25f : -0.25f;
  for (size_t k : {size_t{1}, size_t{100}, n / 2, n - 1, n}) {
    ThresholdReuse r;
    // The same gradient each step, nothing zeroed in between except what the
    // selection takes: the magnitudes stay equal within a step.
    RunSteps({g, g, g, g}, k, false, &r, "all-equal");
    SparseVec out;
    std::vector<float> x = g;
    ThresholdReuse s;
    SelectTopKStep(x.data(), n, k, 0, nullptr, &s, false, &out);
    SelectTopKStep(x.data(), n, k, 0, nullptr, &s, false, &out);
    ASSERT_EQ(out.nnz(), 2 * k);
    for (size_t i = 0; i < k; ++i) ASSERT_EQ(out.idx[k + i], i) << k;
  }
}

TEST(SelectTopKStep, AllZerosSelectNothing) {
  const size_t n = 4096;
  std::vector<float> zeros(n, 0.0f), neg(n, -0.0f);
  for (size_t k : {size_t{0}, size_t{1}, n}) {
    ThresholdReuse r;
    RunSteps({zeros, neg, zeros}, k, true, &r, "zeros");
    EXPECT_EQ(r.last_key, 0u);
    EXPECT_EQ(r.hits, 0u);
  }
}

TEST(SelectTopKStep, NaNNeverSelectedInfIs) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const size_t n = 3001;
  std::vector<float> g = Make(Dist::kGauss, n, 9);
  for (size_t i = 0; i < n; i += 97) g[i] = nan;
  for (size_t i = 5; i < n; i += 301) g[i] = i % 2 ? inf : -inf;
  for (size_t k : {size_t{1}, size_t{5}, size_t{30}, size_t{2000}, n}) {
    ThresholdReuse r;
    // NaN + anything stays NaN, Inf - Inf is NaN: the residual keeps both.
    RunSteps({g, g, Make(Dist::kGauss, n, 10), g}, k, false, &r, "nan-inf");
    ThresholdReuse m;
    RunSteps({Make(Dist::kMixedSpecial, n, 1), Make(Dist::kMixedSpecial, n, 2),
              Make(Dist::kMixedSpecial, n, 3)},
             k, true, &m, "mixed-special");
  }
}

// The non-finite count (the call frame's residual rule) on the full, reuse
// and k = 0 paths: magnitudes above 3.19e38 share +Inf's pass-1 bucket but
// are finite, and two of them can sum to Inf.
TEST(SelectTopKStep, CountsNonFiniteExactly) {
  const size_t n = 5003;
  std::vector<float> big = Make(Dist::kGauss, n, 31), plain = Make(Dist::kGauss, n, 32);
  for (size_t i = 0; i < n; i += 211) big[i] = (i % 2 ? 1.0f : -1.0f) * 3.3e38f;
  big[7] = std::numeric_limits<float>::quiet_NaN();
  for (size_t k : {size_t{0}, size_t{1}, size_t{40}, n}) {
    ThresholdReuse r;
    // Steady steps for reuse hits, then the huge ones (finite, then Inf once
    // they add up), then steady again.
    RunSteps({plain, plain, plain, big, big, plain, plain}, k, false, &r, "huge");
  }
}

TEST(SelectTopKStep, KZeroOneAndN) {
  const size_t n = 20000;
  for (size_t k : {size_t{0}, size_t{1}, n}) {
    for (bool momentum : {false, true}) {
      ThresholdReuse r;
      RunSteps(Grads(Dist::kGauss, n, 4, 21), k, momentum, &r, "k-edge");
      EXPECT_EQ(r.steps, k == 0 ? 0u : 4u);
    }
  }
}

TEST(SelectTopKStep, BucketGrowsAndShrinksBetweenSteps) {
  ThresholdReuse r;
  for (size_t n : {size_t{1000}, size_t{100000}, size_t{50}, size_t{30000}, size_t{30001}}) {
    const size_t k = n / 100 + 1;
    std::vector<float> x = Make(Dist::kGauss, n, static_cast<uint32_t>(n));
    const std::vector<float> g = Make(Dist::kUniform, n, static_cast<uint32_t>(n + 1));
    std::vector<float> ref = x;
    for (size_t i = 0; i < n; ++i) ref[i] = ref[i] + g[i];
    SparseVec want;
    SelectTopKAndZero(ref.data(), n, k, 0, &want);
    Accumulate a{g.data()};
    SparseVec got;
    SelectTopKStep(x.data(), n, k, 0, &a, &r, true, &got);
    ASSERT_TRUE(SameBits(got, want)) << n;
    ASSERT_TRUE(SameFloats(x, ref)) << n;
  }
  EXPECT_EQ(r.steps, 5u);
}

TEST(BlockTopKStep, MatchesAccumulateThenBlockTopK) {
  const size_t n = 30011;
  const std::vector<size_t> bounds = {0, 0, 1, 1, 12000, 12000, 25000, n};
  const std::vector<size_t> k = {5, 1, 0, 100, 3, 5000, 20000};
  for (bool momentum : {false, true}) {
    std::vector<float> x = Make(Dist::kTies, n, 1), u = Make(Dist::kGauss, n, 2);
    std::vector<float> rx = x, ru = u;
    std::vector<ThresholdReuse> reuse;
    for (uint32_t step = 0; step < 4; ++step) {
      const std::vector<float> g = Make(Dist::kGauss, n, 10 + step);
      Unfused ref{rx, ru};
      for (size_t i = 0; i < n; ++i) {  // the accumulation, as Unfused::Step
        float add = g[i];
        if (momentum) {
          const float mu = ref.u[i] * 0.9f;
          ref.u[i] = mu + g[i];
          add = ref.u[i];
        }
        ref.x[i] = ref.x[i] + add;
      }
      size_t want_bad = 0;  // before the selection zeroes any
      for (float v : ref.x) want_bad += std::isfinite(v) ? 0 : 1;
      std::vector<SparseVec> want;
      BlockTopK(ref.x.data(), bounds, k, 7, true, &want);
      rx = ref.x;
      ru = ref.u;
      Accumulate a{g.data(), momentum ? u.data() : nullptr, 0.9f};
      std::vector<SparseVec> got;
      size_t bad = 0;
      BlockTopKStep(x.data(), bounds, k, 7, &a, &reuse, true, &got, &bad);

      ASSERT_EQ(got.size(), want.size());
      for (size_t b = 0; b < k.size(); ++b) {
        ASSERT_TRUE(SameBits(got[b], want[b])) << "block " << b << " step " << step;
      }
      ASSERT_TRUE(SameFloats(x, rx)) << step;
      ASSERT_TRUE(SameFloats(u, ru)) << step;
      ASSERT_EQ(bad, want_bad) << step;
    }
    ASSERT_EQ(reuse.size(), k.size());
  }
}

}  // namespace
}  // namespace gradex::kernels

namespace gradex::kernels {
namespace {

// CompactAboveStep against AccumulateInto then CompactAbove, bit for bit:
// thresholds below zero, zero, NaN, ordinary, +Inf; caps that hold the
// entries and caps that do not (then nothing is appended, x is accumulated).
TEST(CompactAboveStep, MatchesAccumulateThenCompactAbove) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (Dist d : AllDists()) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{31}, size_t{5003}}) {
      const std::vector<float> x0 = Make(d, n, static_cast<uint32_t>(n + 7));
      const std::vector<float> g = Make(d, n, static_cast<uint32_t>(n + 8));
      const std::vector<float> u0 = Make(Dist::kGauss, n, static_cast<uint32_t>(n + 9));
      for (float t : {-1.0f, 0.0f, nan, 0.5f, 2.0f, inf}) {
        for (bool momentum : {false, true}) {
          std::vector<float> rx = x0, ru = u0;
          const Accumulate ra{g.data(), momentum ? ru.data() : nullptr, 0.9f};
          AccumulateInto(rx.data(), n, ra);
          size_t want_bad = 0;
          for (float v : rx) want_bad += std::isfinite(v) ? 0 : 1;
          SparseVec want;
          CompactAbove(rx.data(), n, t, 5, &want);
          for (size_t cap : {want.nnz(), want.nnz() + 3, want.nnz() > 0 ? want.nnz() - 1 : 0}) {
            std::vector<float> x = x0, u = u0;
            const Accumulate a{g.data(), momentum ? u.data() : nullptr, 0.9f};
            SparseVec got;
            got.idx = {99};
            got.val = {1.5f};  // appended after what is there
            size_t bad = 0;
            const size_t c = CompactAboveStep(x.data(), n, &a, t, 5, cap, &got, &bad);
            const std::string w = Where(Name(d), n, cap) + " t=" + std::to_string(t);
            ASSERT_EQ(c, want.nnz()) << w;
            ASSERT_EQ(bad, want_bad) << w;
            ASSERT_TRUE(SameFloats(x, rx)) << w;
            ASSERT_TRUE(SameFloats(u, ru)) << w;
            SparseVec expect;
            expect.idx = {99};
            expect.val = {1.5f};
            if (want.nnz() <= cap) {
              expect.idx.insert(expect.idx.end(), want.idx.begin(), want.idx.end());
              expect.val.insert(expect.val.end(), want.val.begin(), want.val.end());
            }
            ASSERT_TRUE(SameBits(got, expect)) << w;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace gradex::kernels
