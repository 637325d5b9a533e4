// SparDL's balanced blocks: the boundary rule on hand-made results, and the
// family over calls that re-balance every other call: the invariants hold on
// the moved blocks, and the blocks do move.
#include "collectives/algorithms/spardl_balance.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "catalog/models.h"
#include "collectives/block_layout.h"
#include "tests/collectives/harness.h"

namespace gradex {
namespace {

// A result with `per_block` entries in each of the equal blocks of n / parts,
// block b's magnitudes `scale[b]` * (1 .. per_block), spread evenly.
kernels::SparseVec Result(size_t n, const std::vector<float>& scale, size_t per_block) {
  kernels::SparseVec r;
  const size_t parts = scale.size(), width = n / parts;
  for (size_t b = 0; b < parts; ++b) {
    for (size_t i = 0; i < per_block; ++i) {
      r.idx.push_back(static_cast<uint32_t>(b * width + i * (width / per_block)));
      r.val.push_back((i % 2 ? -1.0f : 1.0f) * scale[b] * static_cast<float>(i + 1));
    }
  }
  return r;
}

std::vector<size_t> Equal(size_t n, size_t parts) {
  std::vector<size_t> b;
  for (size_t j = 0; j <= parts; ++j) b.push_back(n * j / parts);
  return b;
}

TEST(BalancedBounds, EqualThresholdsKeepEqualBlocks) {
  const size_t n = 40000;
  const std::vector<size_t> keeps(4, 100);
  const auto next =
      collectives::algorithms::BalancedBounds(Result(n, {1, 1, 1, 1}, 100), Equal(n, 4), keeps);
  EXPECT_EQ(next, Equal(n, 4));
}

TEST(BalancedBounds, AHotBlockShrinksAndTheOthersGrow) {
  const size_t n = 40000;
  const std::vector<size_t> keeps(4, 100);
  // Block 0's smallest kept value (10) is the others' largest: theta = 10,
  // and the 103 entries at or above it are block 0's 100 (at 0, 100, ...,
  // 9900) and one of each other block. Quantiles 25, 51, 77 of them.
  const auto next = collectives::algorithms::BalancedBounds(Result(n, {10, 0.1f, 0.1f, 0.1f}, 100),
                                                            Equal(n, 4), keeps);
  EXPECT_EQ(next, (std::vector<size_t>{0, 2500, 5100, 7700, n}));
  for (size_t j = 0; j < 4; ++j) EXPECT_GE(next[j + 1] - next[j], 4 * keeps[j]) << j;
}

TEST(BalancedBounds, MinimumSpanWins) {
  // The same skew, with quotas that fit only as 4 x their size: the hot
  // block keeps 4 x 100 elements, and with 4 x 250 nothing can move.
  EXPECT_EQ(collectives::algorithms::BalancedBounds(Result(4000, {10, 0.1f, 0.1f, 0.1f}, 100),
                                                    Equal(4000, 4), std::vector<size_t>(4, 100)),
            (std::vector<size_t>{0, 400, 800, 1200, 4000}));
  EXPECT_EQ(collectives::algorithms::BalancedBounds(Result(4000, {10, 0.1f, 0.1f, 0.1f}, 250),
                                                    Equal(4000, 4), std::vector<size_t>(4, 250)),
            Equal(4000, 4));
}

TEST(BalancedBounds, NothingToLearnLeavesTheBounds) {
  const size_t n = 40000;
  const std::vector<size_t> bounds = {0, 5000, 20000, 30000, n};
  // No block kept its full quota: the quotas did not bind.
  EXPECT_EQ(collectives::algorithms::BalancedBounds(Result(n, {1, 2, 3, 4}, 50), bounds,
                                                    std::vector<size_t>(4, 100)),
            bounds);
  // An empty result, and a layout of one block.
  EXPECT_EQ(collectives::algorithms::BalancedBounds(kernels::SparseVec{}, bounds,
                                                    std::vector<size_t>(4, 100)),
            bounds);
  EXPECT_EQ(
      collectives::algorithms::BalancedBounds(Result(n, {1}, 10), std::vector<size_t>{0, n}, {10}),
      (std::vector<size_t>{0, n}));
}

// The family, re-balancing after every second call (training steps 1, 3, 5).
struct FamilyCase {
  std::string algorithm;
  int teams;
};

class SparDLBalanceFamilyTest : public ::testing::TestWithParam<FamilyCase> {};

TEST_P(SparDLBalanceFamilyTest, InvariantsHoldOnMovedBlocks) {
  const FamilyCase& c = GetParam();
  constexpr int kWorld = 4;
  constexpr size_t kN = 40000;
  constexpr int kCalls = 7;
  const int parts = kWorld / c.teams;
  for (double tau : {0.0, 2.0}) {
    collectives::AllreduceOptions options;
    options.density = 0.01;
    options.teams = c.teams;
    options.params["spardl_balance_tau"] = tau;
    const auto runs = testing::RunAlgorithm(c.algorithm, kWorld, kN, options, kCalls,
                                            testing::Values::kIntegers, 7);
    ASSERT_EQ(runs.size(), static_cast<size_t>(kCalls));
    bool moved = false;
    for (int it = 0; it < kCalls; ++it) {
      const auto& calls = runs[it];
      for (int r = 0; r < kWorld; ++r) {
        ASSERT_TRUE(calls[r].status.ok())
            << "tau " << tau << " call " << it << ": " << calls[r].status;
        EXPECT_LE(calls[r].stats.result_nnz, calls[r].stats.result_capacity);
        const double begin = calls[r].stats.Detail("balanced_block_begin");
        const double equal = static_cast<double>(catalog::BlockBegin(kN, parts, r % parts));
        if (begin != equal) moved = true;
        // Calls 0 and 1 run before the first re-balancing.
        if (tau == 0 || it < 2) EXPECT_EQ(begin, equal) << "tau " << tau << " call " << it;
      }
      EXPECT_TRUE(testing::Consistent(calls)) << "tau " << tau << " call " << it;
      EXPECT_LE(testing::ConservationError(calls, /*relative=*/true), 1e-6)
          << "tau " << tau << " call " << it;
    }
    EXPECT_EQ(moved, tau > 0) << "tau " << tau;
  }
}

INSTANTIATE_TEST_SUITE_P(Family, SparDLBalanceFamilyTest,
                         ::testing::Values(FamilyCase{"spardl", 1}, FamilyCase{"spardl-rsag", 2},
                                           FamilyCase{"spardl-bsag", 2}),
                         [](const ::testing::TestParamInfo<FamilyCase>& info) {
                           return testing::TestName(info.param.algorithm);
                         });

}  // namespace
}  // namespace gradex
