// The bucket controller (services/coordinator/bucket_controller.h): the
// dense fallback's hysteresis, sample count and switch back; dropped or
// inconsistent reports never count; "auto" picks the cheapest catalog row.
#include "services/coordinator/bucket_controller.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "catalog/bucket_algorithms.h"
#include "catalog/catalog.h"

namespace gradex::coordinator {
namespace {

constexpr uint64_t kN = 100000;

// Every rank of a P-rank step reports the same buckets; rank r's time is
// `seconds` scaled by (1 + r/10), so the slowest rank's is seconds*(1+(P-1)/10).
void FeedStep(BucketController& c, int world, uint64_t step, std::vector<BucketSample> buckets) {
  for (int r = 0; r < world; ++r) {
    std::vector<BucketSample> mine = buckets;
    for (BucketSample& b : mine) b.seconds *= 1 + r / 10.0;
    c.Feed(r, step, mine);
  }
}

BucketSample Sparse(double s, uint64_t n = kN) { return {n, "spardl", s, false}; }
BucketSample Probe(double s, uint64_t n = kN) { return {n, "dense-ring", s, true}; }

TEST(BucketController, FallsBackToDenseOnlyWhenDenseWinsByTheMarginOverEnoughSamples) {
  BucketController c;
  c.Configure("spardl", false, 0.01, 2, 1);
  uint64_t step = 0;
  // Bucket 0: dense twice as fast; bucket 1: dense 5% faster (inside the
  // margin); bucket 2: dense slower.
  for (int i = 0; i < 3; ++i) {
    FeedStep(c, 2, step++, {Sparse(0.10), Sparse(0.10), Sparse(0.10)});
    EXPECT_TRUE(c.Choices().empty());
    FeedStep(c, 2, step++, {Probe(0.05), Probe(0.095), Probe(0.2)});
    EXPECT_EQ(c.Choices().empty(), i < 2) << "a switch needs 3 samples of each";
  }
  EXPECT_EQ(c.Choices(), (std::vector<std::string>{"dense-ring"}));
  EXPECT_EQ(c.dense_buckets(), 1);
  std::vector<BucketSwitch> sw = c.TakeSwitches();
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].bucket, 0u);
  EXPECT_TRUE(sw[0].to_dense);
  EXPECT_NEAR(sw[0].sparse_seconds, 0.11, 1e-12);  // the slowest rank's
  EXPECT_NEAR(sw[0].dense_seconds, 0.055, 1e-12);
  EXPECT_TRUE(c.TakeSwitches().empty());
}

TEST(BucketController, GoesBackToSparseWhenDenseSlowsPastItAndMediansIgnoreOneOutlier) {
  BucketController c;
  c.Configure("spardl", false, 0.01, 2, 1);
  uint64_t step = 0;
  for (int i = 0; i < 3; ++i) {
    FeedStep(c, 2, step++, {Sparse(0.10)});
    FeedStep(c, 2, step++, {Probe(0.05)});
  }
  ASSERT_EQ(c.Choices(), (std::vector<std::string>{"dense-ring"}));
  c.TakeSwitches();
  // The bucket now runs dense every step (not probes): one slow outlier
  // does not move the median.
  FeedStep(c, 2, step++, {{kN, "dense-ring", 5.0, false}});
  EXPECT_EQ(c.Choices(), (std::vector<std::string>{"dense-ring"}));
  // Dense slows to 0.105 (slowest rank 0.1155): within the margin of sparse.
  for (int i = 0; i < 8; ++i) FeedStep(c, 2, step++, {{kN, "dense-ring", 0.105, false}});
  EXPECT_EQ(c.Choices(), (std::vector<std::string>{"dense-ring"}));
  // Past it: sparse (0.11) < 0.9 * dense.
  for (int i = 0; i < 8 && !c.Choices().empty(); ++i) {
    FeedStep(c, 2, step++, {{kN, "dense-ring", 0.2, false}});
  }
  EXPECT_TRUE(c.Choices().empty());
  std::vector<BucketSwitch> sw = c.TakeSwitches();
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_FALSE(sw[0].to_dense);
}

TEST(BucketController, DroppedOrInconsistentReportsAreNotSamples) {
  BucketController c;
  c.Configure("spardl", false, 0.01, 3, 1);
  uint64_t step = 0;
  // Only two of three ranks report: no step completes (and the open steps
  // stay bounded however many there are).
  for (int i = 0; i < 500; ++i) {
    for (int r = 0; r < 2; ++r) {
      c.Feed(r, step, {i % 2 ? Probe(0.01) : Sparse(1.0)});
    }
    ++step;
  }
  EXPECT_TRUE(c.Choices().empty());
  // Ranks out of range, or reporting twice, do not complete a step.
  for (int i = 0; i < 6; ++i) {
    c.Feed(0, step, {i % 2 ? Probe(0.01) : Sparse(1.0)});
    c.Feed(0, step, {i % 2 ? Probe(0.01) : Sparse(1.0)});
    c.Feed(7, step, {i % 2 ? Probe(0.01) : Sparse(1.0)});
    c.Feed(-1, step, {i % 2 ? Probe(0.01) : Sparse(1.0)});
    c.Feed(1, step, {i % 2 ? Probe(0.01) : Sparse(1.0)});
    ++step;
  }
  EXPECT_TRUE(c.Choices().empty());
  // Ranks that disagree on the bucket's size or kind, unknown names, bad
  // durations: never samples.
  for (int i = 0; i < 6; ++i) {
    const bool dense = i % 2;
    c.Feed(0, step, {dense ? Probe(0.01) : Sparse(1.0), {kN, "no-such", 0.01, false}});
    c.Feed(1, step, {dense ? Probe(0.01, kN + 1) : Sparse(1.0, kN + 1), Sparse(NAN)});
    c.Feed(2, step, {dense ? Sparse(0.01) : Probe(1.0), Sparse(-1)});
    ++step;
  }
  EXPECT_TRUE(c.Choices().empty());
  EXPECT_TRUE(c.TakeSwitches().empty());
}

TEST(BucketController, ANewSizeAtAnIndexOrANewWorldStartsAfresh) {
  BucketController c;
  c.Configure("spardl", false, 0.01, 2, 1);
  uint64_t step = 0;
  for (int i = 0; i < 3; ++i) {
    FeedStep(c, 2, step++, {Sparse(0.10)});
    FeedStep(c, 2, step++, {Probe(0.05)});
  }
  ASSERT_EQ(c.Choices().size(), 1u);
  FeedStep(c, 2, step++, {Sparse(0.10, 2 * kN)});  // the trainer rebuilt its buckets
  EXPECT_TRUE(c.Choices().empty());
  for (int i = 0; i < 3; ++i) {
    FeedStep(c, 2, step++, {Sparse(0.10)});
    FeedStep(c, 2, step++, {Probe(0.05)});
  }
  ASSERT_EQ(c.Choices().size(), 1u);
  c.Configure("spardl", false, 0.01, 2, 1);  // same P and T: kept
  EXPECT_EQ(c.Choices().size(), 1u);
  c.Configure("spardl", false, 0.01, 3, 1);  // a new P
  EXPECT_TRUE(c.Choices().empty());
}

TEST(BucketController, TheCheapestRowWinsAndOnlyAlgorithmsThatRunOnThisP) {
  for (int world : {2, 4, 6, 8}) {
    for (int teams : {1, 2, 3}) {
      if (world % teams != 0) continue;
      for (double density : {0.001, 0.01, 0.3, 1.0}) {
        for (uint64_t n : {uint64_t{1000}, uint64_t{10000000}}) {
          double best_s = 0;
          const std::string best =
              CheapestAlgorithm(world, teams, n, density, 50e-6, 8e-10, &best_s);
          ASSERT_FALSE(best.empty());
          EXPECT_EQ(best_s, ModelSeconds(best, world, teams, n, density, 50e-6, 8e-10));
          for (const catalog::AlgorithmSpec* spec : catalog::All()) {
            EXPECT_LE(best_s, ModelSeconds(spec->name, world, teams, n, density, 50e-6, 8e-10))
                << spec->name << " P=" << world << " T=" << teams;
          }
        }
      }
    }
  }
  // At density 1 a COO entry (8 bytes) costs twice a dense element: what
  // wins sends whole values (dense, or COVAP's whole parts, a third of them
  // per step at its default interval); at interval 1 COVAP is a dense ring
  // and the tie goes to the dense algorithm.
  const std::string whole = CheapestAlgorithm(8, 1, 10000000, 1.0, 50e-6, 8e-10);
  EXPECT_TRUE(catalog::TraitsOf(whole).dense || whole == "covap") << whole;
  EXPECT_TRUE(
      catalog::TraitsOf(CheapestAlgorithm(8, 1, 10000000, 1.0, 50e-6, 8e-10, nullptr, 1)).dense);
  EXPECT_FALSE(catalog::TraitsOf(CheapestAlgorithm(8, 1, 10000000, 0.001, 50e-6, 8e-10)).dense);
  // R-SAG needs a power-of-two team count; no row, no price.
  EXPECT_EQ(ModelSeconds("spardl-rsag", 6, 3, 1000, 0.01, 1e-5, 1e-9), HUGE_VAL);
  EXPECT_LT(ModelSeconds("spardl-bsag", 6, 3, 1000, 0.01, 1e-5, 1e-9), HUGE_VAL);
  EXPECT_EQ(ModelSeconds("no-such", 6, 1, 1000, 0.01, 1e-5, 1e-9), HUGE_VAL);
}

TEST(BucketController, AutoChoosesPerBucketFromTheModelAndTheMeasuredLinks) {
  BucketController c;
  const std::string plan = "spardl-bsag";
  c.Configure(plan, true, 0.01, 4, 1);
  FeedStep(c, 4, 0, {{1000, "", 0.001, false}, {10000000, "", 0.1, false}});
  auto expect = [&](double alpha, double beta) {
    std::vector<std::string> want;
    for (uint64_t n : {uint64_t{1000}, uint64_t{10000000}}) {
      std::string a = CheapestAlgorithm(4, 1, n, 0.01, alpha, beta);
      want.push_back(a == plan ? "" : a);
    }
    while (!want.empty() && want.back().empty()) want.pop_back();
    return want;
  };
  // Before any link estimate: the stated default.
  EXPECT_DOUBLE_EQ(c.alpha(), BucketControllerOptions().default_alpha);
  EXPECT_EQ(c.Choices(), expect(50e-6, 8e-10));
  // A latency-bound link (1 ms per message, 100 Gbit/s): fewer messages win.
  c.FeedLink(1e-3, 8e-11);
  EXPECT_EQ(c.Choices(), expect(1e-3, 8e-11));
  const std::string small = CheapestAlgorithm(4, 1, 1000, 0.01, 1e-3, 8e-11);
  const catalog::CostRange r =
      catalog::Find(small)->table1_cost({.world = 4, .elements = 1000, .density = 0.01});
  EXPECT_LE(r.latency_hi, 2 * 2) << small << ": at most 2 log2(P) messages";
  // Out-of-range estimates are ignored.
  c.FeedLink(NAN, 1e-9);
  c.FeedLink(20, 1e-9);
  EXPECT_DOUBLE_EQ(c.alpha(), 1e-3);
  // Not "auto": no bucket gets its own algorithm from the model.
  c.Configure(plan, false, 0.01, 4, 1);
  EXPECT_TRUE(c.Choices().empty());
}

}  // namespace
}  // namespace gradex::coordinator
