// COVAP's CCR profiler (services/coordinator/controllers/ccr_profiler.h): ranks aligned
// at the end of the exchange, medians over a window of complete steps,
// COVAP steps scaled to the uncompressed exchange, I = ceil(CCR) bounded and
// moved only past a margin.
#include "services/coordinator/controllers/ccr_profiler.h"

#include <gtest/gtest.h>

#include <cmath>

namespace gradex::coordinator {
namespace {

TEST(CcrProfiler, AlignsAtTheEndOfCommunicationAndNeedsEveryRank) {
  // Rank 0 starts 0.3 s early and waits: the exchange is the shortest
  // (end - start), 0.2 s; compute 0.1 s -> CCR 2, I 2 (from the start 3).
  controllers::CcrProfiler p(2, 3, 3);
  for (uint64_t step = 0; step < 3; ++step) {
    EXPECT_FALSE(p.Feed(0, step, 0.5, 0.1, 1));
    EXPECT_FALSE(p.Feed(0, step, 0.5, 0.1, 1)) << "a rank counts once per step";
    EXPECT_EQ(p.Feed(1, step, 0.2, 0.1, 1), step == 2);
  }
  EXPECT_NEAR(p.ccr(), 2.0, 1e-9);
  EXPECT_EQ(p.interval(), 2);
  // One rank's reports only: no step completes, nothing changes.
  controllers::CcrProfiler q(2, 1, 3);
  for (uint64_t step = 0; step < 200; ++step) EXPECT_FALSE(q.Feed(0, step, 10, 0.1, 1));
  EXPECT_EQ(q.interval(), 3);
  EXPECT_EQ(q.samples(), 0);
  // Out of range: ranks, intervals, NaN.
  EXPECT_FALSE(q.Feed(2, 0, 1, 1, 1));
  EXPECT_FALSE(q.Feed(-1, 0, 1, 1, 1));
  EXPECT_FALSE(q.Feed(1, 0, 1, 1, 0));
  EXPECT_FALSE(q.Feed(1, 0, NAN, 1, 1));
}

TEST(CcrProfiler, CovapStepsCountAsTheUncompressedExchange) {
  // COVAP at I = 4 sent a quarter: 0.1 s counts as 0.4 s; compute 0.1 s.
  controllers::CcrProfiler p(1, 2, 4);
  EXPECT_FALSE(p.Feed(0, 0, 0.1, 0.1, 4));
  EXPECT_FALSE(p.Feed(0, 1, 0.1, 0.1, 4));  // ceil(4.0) = 4 = the start: no change
  EXPECT_NEAR(p.ccr(), 4.0, 1e-9);
  EXPECT_EQ(p.interval(), 4);
}

TEST(CcrProfiler, MediansOverTheWindowAndAMarginAroundTheInterval) {
  controllers::CcrProfiler p(1, 4, 3, /*max_interval=*/16, /*window=*/4);
  uint64_t step = 0;
  // CCR 3.5 with one outlier step: the median ignores it; I = 4.
  for (double comm : {0.35, 0.35, 50.0, 0.35}) p.Feed(0, step++, comm, 0.1, 1);
  EXPECT_NEAR(p.ccr(), 3.5, 1e-9);
  EXPECT_EQ(p.interval(), 4);
  // CCR 4.3: ceil is 5, but within 10% of 4: kept.
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(p.Feed(0, step++, 0.43, 0.1, 1));
  EXPECT_EQ(p.interval(), 4);
  // CCR 4.5: past the margin -> 5.
  bool changed = false;
  for (int i = 0; i < 4; ++i) changed |= p.Feed(0, step++, 0.45, 0.1, 1);
  EXPECT_TRUE(changed);
  EXPECT_EQ(p.interval(), 5);
  // CCR 3.7: within 10% below I - 1 = 4: kept; 3.5: down to 4.
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(p.Feed(0, step++, 0.37, 0.1, 1));
  EXPECT_EQ(p.interval(), 5);
  for (int i = 0; i < 4; ++i) p.Feed(0, step++, 0.35, 0.1, 1);
  EXPECT_EQ(p.interval(), 4);
}

TEST(CcrProfiler, BoundedAboveAndBelow) {
  controllers::CcrProfiler hi(1, 1, 3);
  EXPECT_TRUE(hi.Feed(0, 0, 100, 0.1, 1));  // CCR 1000
  EXPECT_EQ(hi.interval(), controllers::kMaxCovapInterval);
  controllers::CcrProfiler none(1, 1, 3);
  none.Feed(0, 0, 1, 0, 1);  // no computation measured
  EXPECT_EQ(none.interval(), controllers::kMaxCovapInterval);
  controllers::CcrProfiler lo(1, 1, 3);
  EXPECT_TRUE(lo.Feed(0, 0, 0.01, 1, 1));  // CCR 0.01: I >= 1
  EXPECT_EQ(lo.interval(), 1);
}

}  // namespace
}  // namespace gradex::coordinator
