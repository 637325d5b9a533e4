#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/sparse.h"
#include "tests/kernels/reference.h"

namespace gradex::kernels {
namespace {

using testing::AllDists;
using testing::Bits;
using testing::Dist;
using testing::Make;
using testing::Name;
using testing::RefThreshold;
using testing::RefTopK;
using testing::SameBits;

std::vector<size_t> SweepN() { return {0, 1, 2, 3, 7, 15, 16, 17, 31, 33, 100, 255, 1000, 4099}; }

std::vector<size_t> SweepK(size_t n) {
  return {0, 1, 2, n / 3, n / 2, n > 0 ? n - 1 : 0, n, n + 1, n + 100};
}

std::string Where(Dist d, size_t n, size_t k) {
  return std::string(Name(d)) + " n=" + std::to_string(n) + " k=" + std::to_string(k);
}

TEST(FindTopKThreshold, MatchesReferenceOnSweep) {
  for (Dist d : AllDists()) {
    for (size_t n : SweepN()) {
      const std::vector<float> x = Make(d, n, static_cast<uint32_t>(n * 7 + 1));
      for (size_t k : SweepK(n)) {
        const TopKThreshold t = FindTopKThreshold(x.data(), n, k);
        const TopKThreshold r = RefThreshold(x.data(), n, k);
        ASSERT_EQ(t.threshold_key, r.threshold_key) << Where(d, n, k);
        ASSERT_EQ(t.take_at_threshold, r.take_at_threshold) << Where(d, n, k);
        ASSERT_EQ(t.count_above, r.count_above) << Where(d, n, k);
      }
    }
  }
}

TEST(SelectTopK, MatchesReferenceOnSweep) {
  for (Dist d : AllDists()) {
    for (size_t n : SweepN()) {
      const std::vector<float> x = Make(d, n, static_cast<uint32_t>(n * 13 + 5));
      for (size_t k : SweepK(n)) {
        SparseVec got;
        const size_t c = SelectTopK(x.data(), n, k, 0, &got);
        const SparseVec want = RefTopK(x.data(), n, k, 0);
        ASSERT_EQ(c, want.nnz()) << Where(d, n, k);
        ASSERT_TRUE(SameBits(got, want)) << Where(d, n, k);
        // The fused path must equal the two-step one.
        SparseVec two;
        const TopKThreshold t = FindTopKThreshold(x.data(), n, k);
        ASSERT_EQ(CompactSelected(x.data(), n, t, 0, &two), t.selected()) << Where(d, n, k);
        ASSERT_TRUE(SameBits(two, want)) << Where(d, n, k);
      }
    }
  }
}

TEST(SelectTopK, LargeRandomMatchesReference) {
  const size_t n = 1000000;
  for (Dist d : {Dist::kGauss, Dist::kUniform, Dist::kTies}) {
    const std::vector<float> x = Make(d, n, 42);
    for (size_t k : {size_t{1}, size_t{1000}, size_t{10000}, size_t{333333}}) {
      SparseVec got;
      SelectTopK(x.data(), n, k, 0, &got);
      ASSERT_TRUE(SameBits(got, RefTopK(x.data(), n, k, 0))) << Where(d, n, k);
    }
  }
}

TEST(SelectTopK, LargeBucketsSelectedByPassesOverX) {
  // All-equal and few-valued inputs put most of n in one radix bucket, which
  // takes the path that does not gather candidates.
  const size_t n = 300007;
  for (Dist d : {Dist::kAllEqual, Dist::kTies, Dist::kDenormal}) {
    const std::vector<float> x = Make(d, n, 99);
    for (size_t k : {size_t{1}, size_t{3000}, n / 2, n}) {
      SparseVec got;
      SelectTopK(x.data(), n, k, 0, &got);
      ASSERT_TRUE(SameBits(got, RefTopK(x.data(), n, k, 0))) << Where(d, n, k);
      const TopKThreshold t = FindTopKThreshold(x.data(), n, k);
      const TopKThreshold r = RefThreshold(x.data(), n, k);
      ASSERT_EQ(t.threshold_key, r.threshold_key) << Where(d, n, k);
      ASSERT_EQ(t.take_at_threshold, r.take_at_threshold) << Where(d, n, k);
      ASSERT_EQ(t.count_above, r.count_above) << Where(d, n, k);
      std::vector<float> y = x;
      SparseVec z;
      SelectTopKAndZero(y.data(), n, k, 0, &z);
      ASSERT_TRUE(SameBits(z, got)) << Where(d, n, k);
      for (uint32_t i : z.idx) {
        ASSERT_EQ(y[i], 0.0f) << Where(d, n, k);
        y[i] = x[i];
      }
      ASSERT_TRUE(std::equal(y.begin(), y.end(), x.begin(), [](float a, float b) {
        return Bits(a) == Bits(b);
      })) << Where(d, n, k);
    }
  }
}

TEST(SelectTopK, AppendsWithIndexBase) {
  const std::vector<float> x = {0.0f, -3.0f, 1.0f, 3.0f, 2.0f};
  SparseVec out;
  out.idx = {7};
  out.val = {9.0f};
  EXPECT_EQ(SelectTopK(x.data(), x.size(), 2, 100, &out), 2u);
  EXPECT_EQ(out.idx, (std::vector<uint32_t>{7, 101, 103}));
  EXPECT_EQ(out.val, (std::vector<float>{9.0f, -3.0f, 3.0f}));
}

TEST(SelectTopK, TiesGoToLowerIndexAndZerosNeverSelected) {
  const std::vector<float> x = {1.0f, -2.0f, 0.0f, 2.0f, -0.0f, -2.0f, 1.0f};
  SparseVec out;
  SelectTopK(x.data(), x.size(), 2, 0, &out);
  EXPECT_EQ(out.idx, (std::vector<uint32_t>{1, 3}));
  out.clear();
  EXPECT_EQ(SelectTopK(x.data(), x.size(), 100, 0, &out), 5u);
  EXPECT_EQ(out.idx, (std::vector<uint32_t>{0, 1, 3, 5, 6}));
}

TEST(SelectTopK, NaNIsNeverSelectedInfIs) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {nan, 1.0f, -inf, -nan, 0.0f, 2.0f};
  SparseVec out;
  EXPECT_EQ(SelectTopK(x.data(), x.size(), 10, 0, &out), 3u);
  EXPECT_EQ(out.idx, (std::vector<uint32_t>{1, 2, 5}));
  const TopKThreshold t = FindTopKThreshold(x.data(), x.size(), 1);
  EXPECT_EQ(t.threshold_key, MagnitudeKey(inf));
  EXPECT_EQ(t.selected(), 1u);
}

TEST(CompactSelected, NothingSelectedAppendsNothing) {
  const std::vector<float> x = {1.0f, 2.0f};
  SparseVec out;
  EXPECT_EQ(CompactSelected(x.data(), x.size(), TopKThreshold{}, 0, &out), 0u);
  EXPECT_EQ(out.nnz(), 0u);
}

TEST(SelectTopKAndZero, LeavesTheResidual) {
  for (Dist d : AllDists()) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{17}, size_t{1000}, size_t{100000}}) {
      const std::vector<float> x = Make(d, n, 3);
      for (size_t k : SweepK(n)) {
        std::vector<float> y = x;
        SparseVec out;
        SelectTopKAndZero(y.data(), n, k, 5, &out);
        ASSERT_TRUE(SameBits(out, RefTopK(x.data(), n, k, 5))) << Where(d, n, k);
        std::vector<float> expect = x;
        for (uint32_t i : out.idx) expect[i - 5] = 0.0f;
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(Bits(y[i]), Bits(expect[i])) << Where(d, n, k);
      }
    }
  }
}

TEST(BlockTopK, MatchesPerBlockReferenceWithEmptyBlocks) {
  const size_t n = 10007;
  const std::vector<float> x = Make(Dist::kTies, n, 11);
  const std::vector<size_t> bounds = {0, 0, 1, 1, 4000, 4000, 9000, n};
  const std::vector<size_t> k = {5, 1, 0, 100, 3, 5000, 20000};
  for (bool zero : {false, true}) {
    std::vector<float> y = x;
    std::vector<SparseVec> out(2);
    out[0].idx = {1};  // stale content is replaced
    out[0].val = {1.0f};
    BlockTopK(y.data(), bounds, k, 50, zero, &out);
    ASSERT_EQ(out.size(), k.size());
    std::vector<float> expect = x;
    for (size_t b = 0; b < k.size(); ++b) {
      const SparseVec want =
          RefTopK(x.data() + bounds[b], bounds[b + 1] - bounds[b], k[b], 50 + bounds[b]);
      EXPECT_TRUE(SameBits(out[b], want)) << "block " << b;
      if (zero) {
        for (uint32_t i : want.idx) expect[i - 50] = 0.0f;
      }
    }
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(Bits(y[i]), Bits(expect[i])) << i;
  }
}

TEST(BlockTopK, NoBlocks) {
  std::vector<SparseVec> out(3);
  BlockTopK(nullptr, {0}, {}, 0, true, &out);
  EXPECT_TRUE(out.empty());
}

TEST(SparseTopK, MatchesReferenceAndPartitions) {
  for (Dist d : AllDists()) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{5}, size_t{100}, size_t{3000}}) {
      const std::vector<float> dense = Make(d, 3 * n, 17);
      // Sparse input with explicit zeros kept: every third position.
      SparseVec in;
      for (size_t i = 0; i < n; ++i) {
        in.idx.push_back(static_cast<uint32_t>(3 * i + 1));
        in.val.push_back(dense[3 * i + 1]);
      }
      for (size_t k : SweepK(n)) {
        SparseVec kept, dropped;
        SparseTopK(View(in), k, &kept, &dropped);
        // Reference: top-k of the values array, mapped to their indices.
        const SparseVec pos = RefTopK(in.val.data(), n, k, 0);
        SparseVec want;
        std::vector<bool> taken(n, false);
        for (size_t j = 0; j < pos.nnz(); ++j) {
          want.idx.push_back(in.idx[pos.idx[j]]);
          want.val.push_back(pos.val[j]);
          taken[pos.idx[j]] = true;
        }
        ASSERT_TRUE(SameBits(kept, want)) << Where(d, n, k);
        SparseVec rest;
        for (size_t j = 0; j < n; ++j) {
          if (!taken[j]) {
            rest.idx.push_back(in.idx[j]);
            rest.val.push_back(in.val[j]);
          }
        }
        ASSERT_TRUE(SameBits(dropped, rest)) << Where(d, n, k);
        SparseVec only;
        SparseTopK(View(in), k, &only, nullptr);
        ASSERT_TRUE(SameBits(only, want)) << Where(d, n, k);
      }
    }
  }
}

}  // namespace
}  // namespace gradex::kernels
