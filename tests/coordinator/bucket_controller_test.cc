// The bucket controller (services/coordinator/controllers/bucket_controller.h): the
// dense fallback's margin, full windows and switch back after the dwell;
// decisions wait for Apply; dropped or inconsistent reports never count;
// "auto" picks the cheapest catalog row once every rank's link is in.
// bucket_dwell_test.cc runs it over simulated hours.
#include "services/coordinator/controllers/bucket_controller.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "catalog/bucket_algorithms.h"
#include "catalog/catalog.h"

namespace gradex::coordinator {
namespace {

constexpr uint64_t kN = 100000;
constexpr uint64_t kNone = controllers::BucketController::kNone;
const absl::Time t0 = absl::FromUnixSeconds(1000);

// Every rank of a P-rank step reports the same buckets; rank r's time is
// `seconds` scaled by (1 + r/10), so the slowest rank's is seconds*(1+(P-1)/10).
// The step ends at t0 + step seconds.
void FeedStep(controllers::BucketController& c, int world, uint64_t step,
              std::vector<controllers::BucketSample> buckets) {
  for (int r = 0; r < world; ++r) {
    std::vector<controllers::BucketSample> mine = buckets;
    for (controllers::BucketSample& b : mine) b.seconds *= 1 + r / 10.0;
    c.Feed(r, step, mine, t0 + absl::Seconds(static_cast<double>(step)));
  }
}

controllers::BucketSample Sparse(double s, uint64_t n = kN) { return {n, "spardl", s, false}; }
controllers::BucketSample Probe(double s, uint64_t n = kN) { return {n, "dense-ring", s, true}; }
controllers::BucketSample Dense(double s, uint64_t n = kN) { return {n, "dense-ring", s, false}; }

// Sparse steps and dense probes alternating (probes on odd steps), every
// decision applied at once from the next step, until `until` (exclusive).
void Alternate(controllers::BucketController& c, uint64_t& step, uint64_t until, double sparse,
               double probe) {
  for (; step < until; ++step) {
    FeedStep(c, 2, step, {step % 2 ? Probe(probe) : Sparse(sparse)});
    c.Apply(kNone, step + 1);
  }
}

TEST(BucketController, FallsBackToDenseOnlyWhenDenseWinsByTheMarginInTwoFullWindows) {
  controllers::BucketController c;
  c.Configure("spardl", false, 0.01, 2, 1, 0);
  // Bucket 0: dense twice as fast; bucket 1: dense 5% faster (inside the
  // margin); bucket 2: dense slower. Sparse runs on even steps: its 8th
  // sample (step 14) completes the first window, its 16th (step 30) the
  // second, and two windows must favour a switch.
  for (uint64_t step = 0; step < 31; ++step) {
    if (step % 2) {
      FeedStep(c, 2, step, {Probe(0.05), Probe(0.095), Probe(0.2)});
    } else {
      FeedStep(c, 2, step, {Sparse(0.10), Sparse(0.10), Sparse(0.10)});
    }
    EXPECT_EQ(c.PendingSince(), step < 30 ? kNone : 30u) << step;
  }
  EXPECT_TRUE(c.Choices().empty()) << "decided, not applied";
  EXPECT_EQ(c.dense_buckets(), 0);
  std::vector<controllers::BucketSwitch> sw = c.TakeSwitches();
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].bucket, 0u);
  EXPECT_TRUE(sw[0].to_dense);
  EXPECT_NEAR(sw[0].sparse_seconds, 0.11, 1e-12);  // the slowest rank's
  EXPECT_NEAR(sw[0].dense_seconds, 0.055, 1e-12);
  EXPECT_EQ(sw[0].sparse_samples, 8);
  EXPECT_EQ(sw[0].dense_samples, 8);
  EXPECT_EQ(sw[0].decided_step, 30u);
  EXPECT_EQ(sw[0].switches, 1);
  EXPECT_EQ(sw[0].hold, absl::Seconds(30));
  EXPECT_TRUE(c.TakeSwitches().empty());
  // The coordinator applies what steps <= decided_by decided.
  c.Apply(29, 48);
  EXPECT_TRUE(c.Choices().empty());
  c.Apply(30, 48);
  EXPECT_EQ(c.Choices(), (std::vector<std::string>{"dense-ring"}));
  EXPECT_EQ(c.dense_buckets(), 1);
  EXPECT_EQ(c.PendingSince(), kNone);
}

TEST(BucketController, GoesBackToSparseAfterTheDwellAndMediansIgnoreOneOutlier) {
  controllers::BucketController c;
  c.Configure("spardl", false, 0.01, 2, 1, 0);
  uint64_t step = 0;
  Alternate(c, step, 31, 0.10, 0.05);
  ASSERT_EQ(c.Choices(), (std::vector<std::string>{"dense-ring"}));
  ASSERT_EQ(c.TakeSwitches().size(), 1u);  // at step 30, t0 + 30 s: held until t0 + 60 s
  // The bucket now runs dense every step (not probes): one slow outlier
  // does not move the median.
  FeedStep(c, 2, step++, {Dense(5.0)});
  // Dense slows to 0.105 (slowest rank 0.1155): within the margin of sparse
  // in the window of steps 31-38.
  for (int i = 0; i < 7; ++i) FeedStep(c, 2, step++, {Dense(0.105)});
  EXPECT_EQ(c.PendingSince(), kNone);
  // Past it (sparse 0.11 < 0.9 * 0.22) from step 39: the windows ending at
  // steps 46 and 54 favour sparse, but the dwell holds until step 60 (t0 +
  // 60 s); the next window (step 62) switches.
  for (; step < 63; ++step) {
    FeedStep(c, 2, step, {Dense(0.2)});
    EXPECT_EQ(c.PendingSince(), step < 62 ? kNone : 62u) << step;
  }
  std::vector<controllers::BucketSwitch> sw = c.TakeSwitches();
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_FALSE(sw[0].to_dense);
  EXPECT_EQ(sw[0].switches, 2);
  EXPECT_EQ(sw[0].hold, absl::Seconds(60)) << "doubled";
  c.Apply(kNone, step);
  EXPECT_TRUE(c.Choices().empty());
}

TEST(BucketController, DroppedOrInconsistentReportsAreNotSamples) {
  controllers::BucketController c;
  c.Configure("spardl", false, 0.01, 3, 1, 0);
  uint64_t step = 0;
  auto feed = [&](int rank, std::vector<controllers::BucketSample> b) {
    c.Feed(rank, step, b, t0);
  };
  // Only two of three ranks report: no step completes (and the open steps
  // stay bounded however many there are).
  for (int i = 0; i < 500; ++i) {
    for (int r = 0; r < 2; ++r) feed(r, {i % 2 ? Probe(0.01) : Sparse(1.0)});
    ++step;
  }
  EXPECT_EQ(c.PendingSince(), kNone);
  // Ranks out of range, or reporting twice, do not complete a step.
  for (int i = 0; i < 60; ++i) {
    feed(0, {i % 2 ? Probe(0.01) : Sparse(1.0)});
    feed(0, {i % 2 ? Probe(0.01) : Sparse(1.0)});
    feed(7, {i % 2 ? Probe(0.01) : Sparse(1.0)});
    feed(-1, {i % 2 ? Probe(0.01) : Sparse(1.0)});
    feed(1, {i % 2 ? Probe(0.01) : Sparse(1.0)});
    ++step;
  }
  EXPECT_EQ(c.PendingSince(), kNone);
  // Ranks that disagree on the bucket's size or kind, unknown names, bad
  // durations: never samples.
  for (int i = 0; i < 60; ++i) {
    const bool dense = i % 2;
    feed(0, {dense ? Probe(0.01) : Sparse(1.0), {kN, "no-such", 0.01, false}});
    feed(1, {dense ? Probe(0.01, kN + 1) : Sparse(1.0, kN + 1), Sparse(NAN)});
    feed(2, {dense ? Sparse(0.01) : Probe(1.0), Sparse(-1)});
    ++step;
  }
  EXPECT_EQ(c.PendingSince(), kNone);
  c.Apply(kNone, step);
  EXPECT_TRUE(c.Choices().empty());
  EXPECT_TRUE(c.TakeSwitches().empty());
}

TEST(BucketController, ANewSizeAtAnIndexOrANewWorldStartsAfresh) {
  controllers::BucketController c;
  c.Configure("spardl", false, 0.01, 2, 1, 0);
  uint64_t step = 0;
  Alternate(c, step, 31, 0.10, 0.05);
  ASSERT_EQ(c.Choices().size(), 1u);
  FeedStep(c, 2, step, {Sparse(0.10, 2 * kN)});  // the trainer rebuilt its buckets
  EXPECT_EQ(c.Choices().size(), 1u) << "what runs changes at a barrier";
  EXPECT_EQ(c.PendingSince(), step);
  c.Apply(kNone, ++step);
  EXPECT_TRUE(c.Choices().empty());
  EXPECT_EQ(c.dense_buckets(), 0);
  const uint64_t again = step + 31;
  Alternate(c, step, again, 0.10, 0.05);
  ASSERT_EQ(c.Choices().size(), 1u);
  ASSERT_EQ(c.TakeSwitches().back().switches, 1) << "a new bucket's first switch";
  c.Configure("spardl", false, 0.01, 2, 1, step);  // same P and T: kept
  EXPECT_EQ(c.Choices().size(), 1u);
  c.Configure("spardl", false, 0.01, 3, 1, step);  // a new P
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
              controllers::CheapestAlgorithm(world, teams, n, density, 50e-6, 8e-10, &best_s);
          ASSERT_FALSE(best.empty());
          EXPECT_EQ(best_s,
                    controllers::ModelSeconds(best, world, teams, n, density, 50e-6, 8e-10));
          for (const catalog::AlgorithmSpec* spec : catalog::All()) {
            EXPECT_LE(best_s,
                      controllers::ModelSeconds(spec->name, world, teams, n, density, 50e-6, 8e-10))
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
  const std::string whole = controllers::CheapestAlgorithm(8, 1, 10000000, 1.0, 50e-6, 8e-10);
  EXPECT_TRUE(catalog::TraitsOf(whole).dense || whole == "covap") << whole;
  EXPECT_TRUE(catalog::TraitsOf(
                  controllers::CheapestAlgorithm(8, 1, 10000000, 1.0, 50e-6, 8e-10, nullptr, 1))
                  .dense);
  EXPECT_FALSE(
      catalog::TraitsOf(controllers::CheapestAlgorithm(8, 1, 10000000, 0.001, 50e-6, 8e-10)).dense);
  // R-SAG needs a power-of-two team count; no row, no price.
  EXPECT_EQ(controllers::ModelSeconds("spardl-rsag", 6, 3, 1000, 0.01, 1e-5, 1e-9), HUGE_VAL);
  EXPECT_LT(controllers::ModelSeconds("spardl-bsag", 6, 3, 1000, 0.01, 1e-5, 1e-9), HUGE_VAL);
  EXPECT_EQ(controllers::ModelSeconds("no-such", 6, 1, 1000, 0.01, 1e-5, 1e-9), HUGE_VAL);
}

TEST(BucketController, AutoChoosesPerBucketFromTheModelAndTheMeasuredLinks) {
  controllers::BucketController c;
  const std::string plan = "spardl-bsag";
  c.Configure(plan, true, 0.01, 4, 1, 0);
  FeedStep(c, 4, 0, {{1000, "", 0.001, false}, {10000000, "", 0.1, false}});
  auto expect = [&](double alpha, double beta) {
    std::vector<std::string> want;
    for (uint64_t n : {uint64_t{1000}, uint64_t{10000000}}) {
      std::string a = controllers::CheapestAlgorithm(4, 1, n, 0.01, alpha, beta);
      want.push_back(a == plan ? "" : a);
    }
    while (!want.empty() && want.back().empty()) want.pop_back();
    return want;
  };
  // Before any link estimate: the stated default, decided by step 0.
  EXPECT_DOUBLE_EQ(c.alpha(), controllers::BucketControllerOptions().default_alpha);
  EXPECT_EQ(c.PendingSince(), 0u);
  c.Apply(kNone, 64);
  EXPECT_EQ(c.Choices(), expect(50e-6, 8e-10));
  // A latency-bound link (1 ms per message, 100 Gbit/s) on one rank: nothing
  // changes until every rank's probe is in (the maxima over ranks).
  c.FeedLink(0, 5, 1e-3, 8e-11);
  c.FeedLink(1, 5, 1e-5, 8e-11);
  c.FeedLink(2, 6, 1e-5, 8e-11);
  EXPECT_DOUBLE_EQ(c.alpha(), controllers::BucketControllerOptions().default_alpha);
  EXPECT_EQ(c.PendingSince(), kNone);
  c.FeedLink(3, 5, 1e-5, 8e-11);
  EXPECT_DOUBLE_EQ(c.alpha(), 1e-3);
  EXPECT_EQ(c.PendingSince(), 6u) << "decided by the latest probe's step, not the last arrival";
  c.Apply(kNone, 128);
  EXPECT_EQ(c.Choices(), expect(1e-3, 8e-11));
  const std::string small = controllers::CheapestAlgorithm(4, 1, 1000, 0.01, 1e-3, 8e-11);
  const catalog::CostRange r =
      catalog::Find(small)->table1_cost({.world = 4, .elements = 1000, .density = 0.01});
  EXPECT_LE(r.latency_hi, 2 * 2) << small << ": at most 2 log2(P) messages";
  // Out-of-range estimates are ignored; the same again changes nothing.
  c.FeedLink(0, 9, NAN, 1e-9);
  c.FeedLink(0, 9, 20, 1e-9);
  c.FeedLink(9, 9, 1, 1e-9);
  c.FeedLink(3, 9, 1e-5, 8e-11);
  EXPECT_DOUBLE_EQ(c.alpha(), 1e-3);
  EXPECT_EQ(c.PendingSince(), kNone);
  // A new epoch keeps the estimate until all of its ranks' probes are in.
  c.Configure(plan, true, 0.01, 4, 1, 192);
  c.FeedLink(0, 192, 1e-5, 8e-11);
  EXPECT_DOUBLE_EQ(c.alpha(), 1e-3);
  // Not "auto": no bucket gets its own algorithm from the model.
  c.Configure(plan, false, 0.01, 4, 1, 256);
  EXPECT_TRUE(c.Choices().empty());
}

// Auto's warm-up (client::kAutoWarmupSteps = 384 dense steps whose odd steps
// time the planned sparse exchange): once both sides hold 16 samples, its
// verdict takes dense where dense is faster by the margin, applied at a plan
// barrier long before step 384, so the bucket never runs sparse there; where
// dense is 5% faster (a near tie) or sparse faster, nothing changes but auto's
// choice (whose new algorithm gets a verdict of its own), and a bucket
// given a verdict for sparse never switches to dense later. Barriers every 64
// steps, a decision of step d applied at the first barrier at or after
// d + 128 (the Coordinator's plan lead and one period).
TEST(BucketController, AutosWarmUpGivesOneVerdictWithoutMarginBeforeTheBucketRunsSparse) {
  constexpr uint64_t kBucket = 235146, kWarmup = 384;
  const std::string dense = std::string(catalog::DenseFallbackAlgorithm());
  auto barrier = [](uint64_t d) { return (d + 128 + 63) / 64 * 64; };
  // Sparse in the warm-up and after it; dense takes 0.008 s a step. The last
  // case: sparse slows 5x after a verdict for it, and stays (the verdict).
  for (const auto [sparse_s, late_s] : std::vector<std::pair<double, double>>{
           {0.017, 0.017}, {0.0084, 0.0084}, {0.004, 0.004}, {0.004, 0.02}}) {
    SCOPED_TRACE(late_s);
    const bool dense_wins = 0.008 < sparse_s * 0.9;
    controllers::BucketController c;
    const std::string plan = "spardl-bsag";
    c.Configure(plan, true, 0.01, 4, 1, 0);
    for (int r = 0; r < 4; ++r) c.FeedLink(r, 0, 1.6e-5, 4.3e-10);  // loopback's
    std::vector<controllers::BucketSwitch> switches, kept;
    for (uint64_t step = 0; step < kWarmup + 200; ++step) {
      const std::vector<std::string> applied = c.Choices();
      const std::string runs = applied.empty() || applied[0].empty() ? plan : applied[0];
      if (step >= kWarmup) {  // what runs, and a dense probe every 50 steps
        FeedStep(c, 4, step,
                 {step % 50 == 49 && runs != dense
                      ? controllers::BucketSample{kBucket, dense, 0.008, true}
                      : controllers::BucketSample{kBucket, runs, runs == dense ? 0.008 : late_s,
                                                  false}});
      } else if (step % 2 == 0 || runs == dense) {  // the warm-up's own dense run
        FeedStep(c, 4, step, {{kBucket, "dense-ring", 0.008, false}});
      } else {  // the sparse probe of what is planned
        FeedStep(c, 4, step, {{kBucket, runs, sparse_s, false}});
      }
      for (const controllers::BucketSwitch& sw : c.TakeSwitches()) switches.push_back(sw);
      for (const controllers::BucketSwitch& v : c.TakeKeptSparse()) kept.push_back(v);
      const uint64_t pending = c.PendingSince();
      if (pending != kNone && barrier(pending) == step + 1) c.Apply(pending, step + 1);
    }
    ASSERT_FALSE(c.Choices().empty()) << "auto's choice or the verdict applied";
    if (dense_wins) {
      ASSERT_EQ(switches.size(), 1u) << "one verdict, nothing after it";
      EXPECT_TRUE(switches[0].warmup);
      EXPECT_TRUE(switches[0].to_dense);
      EXPECT_EQ(switches[0].decided_step, 31u) << "16 dense runs and 16 sparse probes";
      EXPECT_EQ(switches[0].sparse_samples, 16);
      EXPECT_EQ(c.Choices()[0], dense);
      EXPECT_TRUE(kept.empty());
    } else {
      EXPECT_TRUE(switches.empty());
      EXPECT_FALSE(catalog::TraitsOf(c.Choices()[0]).dense);
      // One verdict on the plan's algorithm (16 probes by step 31), one on
      // auto's from step 128 (its 16th probe at step 159).
      ASSERT_EQ(kept.size(), 2u);
      EXPECT_EQ(kept[0].decided_step, 31u);
      EXPECT_EQ(kept[1].decided_step, 159u);
    }
    EXPECT_EQ(c.PendingSince(), kNone);
  }
  // Without a warm-up the margin holds: a sparse bucket whose dense probes
  // are 5% faster stays sparse (no own dense run: no verdict).
  controllers::BucketController c;
  c.Configure("spardl", false, 0.01, 2, 1, 0);
  for (uint64_t step = 0; step < 200; ++step) {
    FeedStep(c, 2, step, {step % 2 ? Probe(0.095) : Sparse(0.10)});
  }
  EXPECT_TRUE(c.TakeSwitches().empty());
  EXPECT_EQ(c.PendingSince(), kNone);
}

}  // namespace
}  // namespace gradex::coordinator
