#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/sparse.h"
#include "tests/kernels/reference.h"

namespace gradex::kernels {
namespace {

using testing::AllDists;
using testing::Bits;
using testing::Dist;
using testing::Make;
using testing::RefMergeAdd;
using testing::SameBits;

SparseVec RandomRun(size_t universe, double density, uint32_t seed, bool integers = false) {
  std::mt19937 rng(seed);
  std::bernoulli_distribution pick(density);
  std::normal_distribution<float> g;
  SparseVec s;
  for (size_t i = 0; i < universe; ++i) {
    if (pick(rng)) {
      s.idx.push_back(static_cast<uint32_t>(i));
      s.val.push_back(integers ? static_cast<float>(static_cast<int>(rng() % 7) - 3) : g(rng));
    }
  }
  return s;
}

SparseVec Make2(std::vector<uint32_t> idx, std::vector<float> val) {
  SparseVec s;
  s.idx = std::move(idx);
  s.val = std::move(val);
  return s;
}

TEST(MergeAdd, DisjointRuns) {
  const SparseVec a = Make2({0, 4, 9}, {1, 2, 3});
  const SparseVec b = Make2({1, 5, 10, 11}, {4, 5, 6, 7});
  SparseVec out;
  MergeAdd(View(a), View(b), &out);
  EXPECT_EQ(out.idx, (std::vector<uint32_t>{0, 1, 4, 5, 9, 10, 11}));
  EXPECT_EQ(out.val, (std::vector<float>{1, 4, 2, 5, 3, 6, 7}));
}

TEST(MergeAdd, OverlappingAndCancellingRunsKeepExplicitZeros) {
  const SparseVec a = Make2({2, 3, 7}, {1.5f, -2.0f, 4.0f});
  const SparseVec b = Make2({3, 7, 8}, {2.0f, 1.0f, -1.0f});
  SparseVec out;
  MergeAdd(View(a), View(b), &out);
  EXPECT_EQ(out.idx, (std::vector<uint32_t>{2, 3, 7, 8}));
  EXPECT_EQ(out.val, (std::vector<float>{1.5f, 0.0f, 5.0f, -1.0f}));
}

TEST(MergeAdd, EmptyInputsAndNegativeZero) {
  const SparseVec a = Make2({1, 2}, {-0.0f, 3.0f});
  const SparseVec e;
  SparseVec out;
  MergeAdd(View(a), View(e), &out);
  EXPECT_TRUE(SameBits(out, a));
  MergeAdd(View(e), View(a), &out);
  EXPECT_TRUE(SameBits(out, a));
  MergeAdd(View(e), View(e), &out);
  EXPECT_EQ(out.nnz(), 0u);
  // -0.0f taken alone stays -0.0f in the interleaved part too.
  const SparseVec b = Make2({0, 3}, {1.0f, 1.0f});
  MergeAdd(View(a), View(b), &out);
  ASSERT_EQ(out.nnz(), 4u);
  EXPECT_EQ(Bits(out.val[1]), Bits(-0.0f));
}

TEST(MergeAdd, RandomRunsMatchReference) {
  for (double da : {0.0, 0.01, 0.3, 1.0}) {
    for (double db : {0.0, 0.05, 0.5, 1.0}) {
      const SparseVec a = RandomRun(5000, da, 1);
      const SparseVec b = RandomRun(5000, db, 2);
      SparseVec out;
      MergeAdd(View(a), View(b), &out);
      EXPECT_TRUE(SameBits(out, RefMergeAdd(View(a), View(b)))) << da << " " << db;
    }
  }
}

TEST(MergeAdd, OutputMayAliasAnInput) {
  SparseVec acc = RandomRun(3000, 0.2, 3);
  const SparseVec b = RandomRun(3000, 0.2, 4);
  const SparseVec want = RefMergeAdd(View(acc), View(b));
  MergeAdd(View(acc), View(b), &acc);
  EXPECT_TRUE(SameBits(acc, want));
  SparseVec acc2 = RandomRun(3000, 0.2, 5);
  const SparseVec want2 = RefMergeAdd(View(b), View(acc2));
  MergeAdd(View(b), View(acc2), &acc2);
  EXPECT_TRUE(SameBits(acc2, want2));
}

TEST(MergeAddKeepCancelled, ACancelledSumIsNegativeZeroTwoAbsentZerosStayAbsent) {
  const SparseVec a = Make2({2, 3, 5, 7, 9}, {1.5f, -2.0f, 0.0f, 4.0f, -0.0f});
  const SparseVec b = Make2({3, 5, 7, 8, 9}, {2.0f, 0.0f, 1.0f, -1.0f, 0.0f});
  SparseVec out;
  MergeAddKeepCancelled(View(a), View(b), &out);
  EXPECT_EQ(out.idx, (std::vector<uint32_t>{2, 3, 5, 7, 8, 9}));
  EXPECT_EQ(out.val, (std::vector<float>{1.5f, 0.0f, 0.0f, 5.0f, -1.0f, 0.0f}));
  EXPECT_EQ(Bits(out.val[1]), Bits(-0.0f));  // 2 + -2: cancelled, present
  EXPECT_EQ(Bits(out.val[2]), Bits(0.0f));   // +0 + +0: nothing was there
  EXPECT_EQ(Bits(out.val[5]), Bits(-0.0f));  // -0 (present) + +0 stays present
  EXPECT_FALSE(IsPresent(0.0f));
  EXPECT_TRUE(IsPresent(-0.0f));
  EXPECT_TRUE(IsPresent(std::numeric_limits<float>::denorm_min()));
}

TEST(MergeAddKeepCancelled, DiffersFromMergeAddOnlyWhereASumCancelled) {
  for (double d : {0.05, 0.5, 1.0}) {
    // Small integers: many sums cancel exactly.
    const SparseVec a = RandomRun(4000, d, 7, /*integers=*/true);
    const SparseVec b = RandomRun(4000, d, 8, /*integers=*/true);
    SparseVec plain, kept;
    MergeAdd(View(a), View(b), &plain);
    MergeAddKeepCancelled(View(a), View(b), &kept);
    ASSERT_EQ(kept.idx, plain.idx);
    std::vector<int> seen(4000, 0);
    for (size_t i = 0; i < a.nnz(); ++i) seen[a.idx[i]] |= a.val[i] != 0.0f ? 1 : 0;
    for (size_t i = 0; i < b.nnz(); ++i) seen[b.idx[i]] |= b.val[i] != 0.0f ? 2 : 0;
    size_t cancelled = 0;
    for (size_t i = 0; i < kept.nnz(); ++i) {
      const bool cancels = seen[kept.idx[i]] == 3 && plain.val[i] == 0.0f;
      cancelled += cancels;
      EXPECT_EQ(Bits(kept.val[i]), cancels ? Bits(-0.0f) : Bits(plain.val[i])) << kept.idx[i];
    }
    EXPECT_GT(cancelled, 0u) << d;
  }
}

TEST(ScatterAdd, AddsScaledWithIndexBase) {
  std::vector<float> dense = {1, 1, 1, 1};
  const SparseVec s = Make2({10, 12, 13}, {2, -3, 0.5f});
  ScatterAdd(View(s), 10, 1.0f, dense.data());
  EXPECT_EQ(dense, (std::vector<float>{3, 1, -2, 1.5f}));
  ScatterAdd(View(s), 10, 0.5f, dense.data());
  EXPECT_EQ(dense, (std::vector<float>{4, 1, -3.5f, 1.75f}));
}

TEST(ScatterAdd, RandomMatchesReference) {
  const SparseVec s = RandomRun(100000, 0.05, 9);
  std::vector<float> dense = Make(Dist::kGauss, 100000, 10), want = dense;
  for (size_t i = 0; i < s.nnz(); ++i) {
    const float p = -0.25f * s.val[i];
    want[s.idx[i]] += p;
  }
  ScatterAdd(View(s), 0, -0.25f, dense.data());
  for (size_t i = 0; i < dense.size(); ++i) ASSERT_EQ(Bits(dense[i]), Bits(want[i])) << i;
}

TEST(DenseToSparse, RoundTripsOnSweep) {
  for (Dist d : AllDists()) {
    for (size_t n :
         {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{1000}, size_t{100003}}) {
      const std::vector<float> x = Make(d, n, 21);
      SparseVec s;
      s.idx = {99};  // replaced, not appended to
      s.val = {1.0f};
      DenseToSparse(x.data(), n, 7, &s);
      SparseVec want;
      for (size_t i = 0; i < n; ++i) {
        if (x[i] != 0.0f || std::isnan(x[i])) {
          want.idx.push_back(static_cast<uint32_t>(7 + i));
          want.val.push_back(x[i]);
        }
      }
      ASSERT_TRUE(SameBits(s, want)) << testing::Name(d) << " n=" << n;
      // Back to dense: every nonzero restored, -0.0f becomes +0.0f.
      std::vector<float> back(n, 5.0f);
      SparseToDense(View(s), 7, back.data(), n);
      for (size_t i = 0; i < n; ++i) {
        const float expect = x[i] == 0.0f ? 0.0f : x[i];
        ASSERT_EQ(Bits(back[i]), Bits(expect)) << i;
      }
    }
  }
}

TEST(DenseToSparse, MillionEntriesSparse) {
  std::vector<float> x(1000000, 0.0f);
  for (size_t i = 3; i < x.size(); i += 97) x[i] = static_cast<float>(i);
  SparseVec s;
  DenseToSparse(x.data(), x.size(), 0, &s);
  ASSERT_EQ(s.nnz(), (x.size() - 3 + 96) / 97);
  for (size_t j = 0; j < s.nnz(); ++j) ASSERT_EQ(s.idx[j], 3 + 97 * j);
}

TEST(CompactAbove, MatchesReference) {
  for (Dist d : AllDists()) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{31}, size_t{5000}, size_t{70000}}) {
      const std::vector<float> x = Make(d, n, 31);
      for (float thr : {0.5f, 1.0f, 2.0f, std::numeric_limits<float>::denorm_min(), 1e30f,
                        std::numeric_limits<float>::infinity()}) {
        SparseVec out;
        out.idx = {0};
        out.val = {0.0f};
        const size_t c = CompactAbove(x.data(), n, thr, 3, &out);
        SparseVec want;
        want.idx = {0};
        want.val = {0.0f};
        for (size_t i = 0; i < n; ++i) {
          if (std::fabs(x[i]) >= thr && x[i] != 0.0f) {
            want.idx.push_back(static_cast<uint32_t>(3 + i));
            want.val.push_back(x[i]);
          }
        }
        ASSERT_EQ(c, want.nnz() - 1);
        ASSERT_TRUE(SameBits(out, want)) << testing::Name(d) << " n=" << n << " thr=" << thr;
      }
    }
  }
}

TEST(CompactAbove, NonPositiveOrNaNThreshold) {
  const std::vector<float> x = {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f};
  SparseVec out;
  EXPECT_EQ(CompactAbove(x.data(), x.size(), 0.0f, 0, &out), 2u);
  EXPECT_EQ(out.idx, (std::vector<uint32_t>{1, 3}));
  out.clear();
  EXPECT_EQ(CompactAbove(x.data(), x.size(), std::numeric_limits<float>::quiet_NaN(), 0, &out), 0u);
}

TEST(IsSortedUniqueInRange, AcceptsValidRuns) {
  EXPECT_TRUE(IsSortedUniqueInRange(nullptr, 0, 5, 5));
  const std::vector<uint32_t> a = {3, 4, 8, 100};
  EXPECT_TRUE(IsSortedUniqueInRange(a.data(), a.size(), 3, 101));
  std::vector<uint32_t> big(5000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint32_t>(2 * i);
  EXPECT_TRUE(IsSortedUniqueInRange(big.data(), big.size(), 0, 10000));
  const std::vector<uint32_t> top = {0xfffffffeu};
  EXPECT_TRUE(IsSortedUniqueInRange(top.data(), 1, 0, 0xffffffffu));
}

TEST(IsSortedUniqueInRange, RejectsViolations) {
  const std::vector<uint32_t> a = {3, 4, 8, 100};
  EXPECT_FALSE(IsSortedUniqueInRange(a.data(), a.size(), 4, 101));  // below lo
  EXPECT_FALSE(IsSortedUniqueInRange(a.data(), a.size(), 3, 100));  // at hi
  EXPECT_FALSE(IsSortedUniqueInRange(a.data(), a.size(), 10, 5));   // empty range
  const std::vector<uint32_t> dup = {1, 2, 2, 3};
  EXPECT_FALSE(IsSortedUniqueInRange(dup.data(), dup.size(), 0, 10));
  const std::vector<uint32_t> down = {1, 5, 4, 6};
  EXPECT_FALSE(IsSortedUniqueInRange(down.data(), down.size(), 0, 10));
  // A violation deep inside a long run, past the first block.
  std::vector<uint32_t> big(5000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint32_t>(2 * i);
  big[4321] = big[4320];
  EXPECT_FALSE(IsSortedUniqueInRange(big.data(), big.size(), 0, 10000));
  big[4321] = big[4320] - 1;
  EXPECT_FALSE(IsSortedUniqueInRange(big.data(), big.size(), 0, 10000));
}

}  // namespace
// The frames' and results' non-finite check: the first NaN or +-Inf, or n.
TEST(FirstNonFinite, FindsTheFirstNaNOrInfOnly) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x(1000, 1.0f);
  x[3] = std::numeric_limits<float>::max();
  x[4] = std::numeric_limits<float>::denorm_min();
  x[5] = -0.0f;
  EXPECT_EQ(FirstNonFinite(x.data(), x.size()), x.size());
  EXPECT_EQ(FirstNonFinite(nullptr, 0), 0u);
  for (float bad : {nan, inf, -inf}) {
    std::vector<float> y = x;
    y[700] = bad;
    y[900] = nan;
    EXPECT_EQ(FirstNonFinite(y.data(), y.size()), 700u) << bad;
  }
  x[0] = -inf;
  EXPECT_EQ(FirstNonFinite(x.data(), x.size()), 0u);
}

// The device residual's host twins (kernels/sparse.h).
TEST(ZeroNonFinite, ZeroesNaNAndInfOnlyAndReportsTheFirst) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float den = std::numeric_limits<float>::denorm_min();
  const float big = std::numeric_limits<float>::max();
  const std::vector<float> x = {1.5f, -0.0f, den,  -den, big, -big,
                                0.0f, nan,   2.0f, -inf, inf, -nan};
  std::vector<float> y = x;
  size_t first = 12345;
  EXPECT_EQ(ZeroNonFinite(y.data(), y.size(), &first), 4u);
  EXPECT_EQ(first, 7u);
  for (size_t i = 0; i < x.size(); ++i) {
    const bool bad = i == 7 || i == 9 || i == 10 || i == 11;
    // Zeroed entries are +0; the rest keep their bits (-0 and denormals too).
    EXPECT_EQ(Bits(y[i]), bad ? 0u : Bits(x[i])) << i;
  }
  // All finite: nothing changes, first is n; a null first is allowed.
  std::vector<float> z(x.begin(), x.begin() + 7);
  const std::vector<float> z0 = z;
  EXPECT_EQ(ZeroNonFinite(z.data(), z.size(), &first), 0u);
  EXPECT_EQ(first, 7u);
  for (size_t i = 0; i < z.size(); ++i) EXPECT_EQ(Bits(z[i]), Bits(z0[i])) << i;
  EXPECT_EQ(ZeroNonFinite(y.data(), y.size(), nullptr), 0u);
  EXPECT_EQ(ZeroNonFinite(nullptr, 0, &first), 0u);
  EXPECT_EQ(first, 0u);
  // The very first entry.
  std::vector<float> w = {-inf, 1.0f, nan};
  EXPECT_EQ(ZeroNonFinite(w.data(), w.size(), &first), 2u);
  EXPECT_EQ(first, 0u);
}

TEST(ZeroNonFinite, MatchesANaiveLoopOnMixedSpecials) {
  for (size_t n : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{100003}}) {
    const std::vector<float> x = Make(Dist::kMixedSpecial, n, static_cast<uint32_t>(n));
    std::vector<float> want = x;
    size_t want_count = 0, want_first = n;
    for (size_t i = 0; i < n; ++i) {
      if (std::isnan(want[i]) || std::isinf(want[i])) {
        if (want_first == n) want_first = i;
        want[i] = 0.0f;
        ++want_count;
      }
    }
    std::vector<float> y = x;
    size_t first = 0;
    EXPECT_EQ(ZeroNonFinite(y.data(), n, &first), want_count) << n;
    EXPECT_EQ(first, want_first) << n;
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(Bits(y[i]), Bits(want[i])) << n << " " << i;
  }
}

TEST(ZeroAt, ZeroesTheIndicesLessTheBaseOnly) {
  std::vector<float> x = {1.0f, -2.0f, 3.0f, std::numeric_limits<float>::quiet_NaN(), 5.0f, -0.0f};
  const std::vector<float> x0 = x;
  const std::vector<uint32_t> idx = {103, 100, 103, 105};  // a repeat is harmless
  ZeroAt(idx.data(), idx.size(), 100, x.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const bool hit = i == 0 || i == 3 || i == 5;
    EXPECT_EQ(Bits(x[i]), hit ? 0u : Bits(x0[i])) << i;
  }
  ZeroAt(nullptr, 0, 0, x.data());
  EXPECT_EQ(x[1], -2.0f);
  EXPECT_EQ(x[2], 3.0f);
  EXPECT_EQ(x[4], 5.0f);
}

TEST(SumOfSquares, AccumulatesInDoubleInIndexOrder) {
  EXPECT_EQ(SumOfSquares(nullptr, 0), 0.0);
  const std::vector<float> small = {1.0f, -2.0f, 3.0f, -0.0f};
  EXPECT_EQ(SumOfSquares(small.data(), small.size()), 14.0);
  // 1e30^2 overflows a float but not a double.
  const std::vector<float> huge = {1e30f, -1e30f};
  const double h = static_cast<double>(1e30f);
  EXPECT_EQ(SumOfSquares(huge.data(), huge.size()), h * h + h * h);
  EXPECT_TRUE(std::isfinite(SumOfSquares(huge.data(), huge.size())));
  // The index order's rounding, bit for bit.
  const std::vector<float> g = Make(Dist::kGauss, 100003, 9);
  double want = 0;
  for (float v : g) want += static_cast<double>(v) * static_cast<double>(v);
  EXPECT_EQ(SumOfSquares(g.data(), g.size()), want);
  // Non-finite entries: Inf gives Inf, NaN gives NaN.
  const std::vector<float> with_inf = {1.0f, -std::numeric_limits<float>::infinity()};
  EXPECT_EQ(SumOfSquares(with_inf.data(), with_inf.size()),
            std::numeric_limits<double>::infinity());
  const std::vector<float> with_nan = {std::numeric_limits<float>::quiet_NaN(), 1.0f};
  EXPECT_TRUE(std::isnan(SumOfSquares(with_nan.data(), with_nan.size())));
}

}  // namespace gradex::kernels
