// The bucket pipeline, one bucket after another: buckets of different
// sizes with residuals kept per span, the per-bucket algorithm
// rules (agreed in-band: ranks given different ones run the lowest rank's),
// and a peer that dies in the middle of a step: every survivor keeps
// the failed bucket's and every later bucket's gradient whole in its
// residual, and runs the next step in the next epoch.
#include <gtest/gtest.h>

#include <barrier>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pipeline/agent.h"
#include "tests/agent/bucket_harness.h"
#include "tests/agent/loopback_provider.h"
#include "tests/collectives/harness.h"
#include "tests/fakes/fake_control_plane.h"

namespace gradex {
namespace {

using gradex::testing::ConservationError;
using gradex::testing::Consistent;
using gradex::testing::MakeGradient;
using gradex::testing::RankCall;
using gradex::testing::Values;
using std::chrono::milliseconds;

using testing::BucketBox;
using testing::CallOf;
using testing::StepRun;
const std::vector<size_t>& kSizes = testing::kBucketSizes;

testing::FakeJobConfig Job(int world, const std::string& algorithm) {
  return testing::BucketJob(world, algorithm);
}

TEST(BucketChoiceTest, RulesInOrder) {
  member::Plan plan;
  plan.algorithm = "spardl";
  plan.density = 0.01;
  plan.bucket_algorithms = {"", "topka"};
  member::BucketRules rules;
  rules.start_iter = 5;
  rules.min_compression_rate = 2.0;
  rules.dense_probe_period = 10;
  EXPECT_EQ(member::ChooseBucketAlgorithm(plan, rules, 4, 0, 100000).algorithm, "dense-ring");
  EXPECT_FALSE(member::ChooseBucketAlgorithm(plan, rules, 4, 0, 100000).dense_probe);
  EXPECT_EQ(member::ChooseBucketAlgorithm(plan, rules, 5, 0, 100000).algorithm, "spardl");
  EXPECT_EQ(member::ChooseBucketAlgorithm(plan, rules, 5, 1, 100000).algorithm, "topka");
  EXPECT_EQ(member::ChooseBucketAlgorithm(plan, rules, 5, 2, 100000).algorithm, "spardl");
  // A probe step runs the bucket's own algorithm and times dense beside it.
  member::BucketChoice probe = member::ChooseBucketAlgorithm(plan, rules, 9, 1, 100000);
  EXPECT_EQ(probe.algorithm, "topka");
  EXPECT_TRUE(probe.dense_probe);
  EXPECT_TRUE(member::ChooseBucketAlgorithm(plan, rules, 19, 0, 100000).dense_probe);
  EXPECT_FALSE(member::ChooseBucketAlgorithm(plan, rules, 18, 0, 100000).dense_probe);
  // A dense bucket times itself: no probe (start_iter; a small bucket below).
  EXPECT_FALSE(member::ChooseBucketAlgorithm(plan, rules, 4, 0, 100000).dense_probe);
  // The warm-up's odd steps time the bucket's planned sparse exchange; its
  // even steps are the dense samples; none after it.
  member::BucketChoice warm = member::ChooseBucketAlgorithm(plan, rules, 3, 1, 100000);
  EXPECT_EQ(warm.algorithm, "dense-ring");
  EXPECT_TRUE(warm.sparse_probe);
  EXPECT_EQ(warm.probe_algorithm, "topka");
  EXPECT_FALSE(warm.dense_probe);
  EXPECT_EQ(member::ChooseBucketAlgorithm(plan, rules, 1, 0, 100000).probe_algorithm, "spardl");
  EXPECT_FALSE(member::ChooseBucketAlgorithm(plan, rules, 4, 1, 100000).sparse_probe);
  EXPECT_FALSE(member::ChooseBucketAlgorithm(plan, rules, 5, 1, 100000).sparse_probe);
  EXPECT_FALSE(member::ChooseBucketAlgorithm(plan, rules, 7, 1, 100000).sparse_probe);
  // n = 400 at d = 0.01: k = 4, rate 1600 / 32 = 50 (sparse); n = 100: k = 1,
  // rate 400 / 8 = 50; at density 0.5, n = 100: k = 50, rate 1 < 2 (dense).
  EXPECT_EQ(member::ChooseBucketAlgorithm(plan, rules, 6, 0, 400).algorithm, "spardl");
  plan.density = 0.5;
  EXPECT_EQ(member::ChooseBucketAlgorithm(plan, rules, 6, 0, 100).algorithm, "dense-ring");
  EXPECT_FALSE(member::ChooseBucketAlgorithm(plan, rules, 9, 0, 100).dense_probe);
  EXPECT_FALSE(member::ChooseBucketAlgorithm(plan, rules, 3, 0, 100).sparse_probe)
      << "dense anyway";
  // rate exactly 2 (d = 0.25) is not below it.
  plan.density = 0.25;
  EXPECT_EQ(member::ChooseBucketAlgorithm(plan, rules, 6, 0, 100).algorithm, "spardl");
  plan.bucket_algorithms = {"dense-ring"};  // the coordinator chose dense: nothing to time
  EXPECT_FALSE(member::ChooseBucketAlgorithm(plan, rules, 3, 0, 100000).sparse_probe);
  plan.bucket_algorithms = {};
  rules.dense_probe_period = 0;  // no probes, no timed warm-up
  EXPECT_FALSE(member::ChooseBucketAlgorithm(plan, rules, 3, 0, 100000).sparse_probe);
  rules = {};
  EXPECT_EQ(member::ChooseBucketAlgorithm(plan, rules, 0, 0, 100).algorithm, "spardl");
  EXPECT_EQ(member::ChooseBucketAlgorithm(plan, rules, 49, 0, 100).algorithm, "spardl");
}

// One step of `box`, one bucket after another.
StepRun RunStep(BucketBox& box, int rank, int iteration,
                const std::function<void(size_t)>& after_bucket) {
  return testing::RunPipelineStep(box, rank, iteration, after_bucket);
}

TEST(AgentBucketsTest, PeerDyingMidStepKeepsEveryLaterBucketInTheResidual) {
  testing::FakeCoordinator coordinator(Job(3, "spardl"));
  constexpr int kKillStep = 3;
  std::vector<std::vector<StepRun>> runs =
      testing::RunKillingRank2(coordinator, kKillStep, 6, RunStep);
  // Steps before the kill: every bucket consistent and conserved over 3 ranks.
  for (int it = 0; it < kKillStep; ++it) {
    for (size_t b = 0; b < kSizes.size(); ++b) {
      std::vector<RankCall> calls;
      for (int i = 0; i < 3; ++i) {
        const StepRun& r = runs[i][it];
        ASSERT_TRUE(r.end.ok()) << r.end;
        ASSERT_TRUE(r.buckets[b].ok()) << r.buckets[b];
        EXPECT_EQ(r.outcomes[b].algorithm, "spardl");
        calls.push_back(CallOf(r, b));
      }
      EXPECT_TRUE(Consistent(calls)) << "step " << it << " bucket " << b;
      EXPECT_EQ(ConservationError(calls, /*relative=*/false), 0.0) << "step " << it;
    }
  }
  // The dying step's bucket 0 completed on all three ranks before the kill:
  // what the survivors keep of it is a consistent, conserved result.
  {
    std::vector<RankCall> calls;
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(runs[i][kKillStep].buckets[0].ok()) << runs[i][kKillStep].buckets[0];
      calls.push_back(CallOf(runs[i][kKillStep], 0));
    }
    EXPECT_TRUE(Consistent(calls)) << "the dying step's bucket 0";
    EXPECT_EQ(ConservationError(calls, /*relative=*/false), 0.0) << "the dying step's bucket 0";
  }
  for (int i : {0, 1}) {
    const StepRun& r = runs[i][kKillStep];
    ASSERT_TRUE(r.buckets[0].ok()) << r.buckets[0];
    EXPECT_FALSE(r.end.ok());
    EXPECT_NE(r.end.message().find("bucket 1"), std::string::npos) << r.end;
    for (size_t b = 1; b < kSizes.size(); ++b) {
      ASSERT_FALSE(r.buckets[b].ok());
      EXPECT_NE(r.buckets[b].message().find("bucket 1"), std::string::npos)
          << "names the first failure: " << r.buckets[b];
      testing::ExpectKept(r, b, i);
    }
    // Recovered: the next steps run in a new epoch of two, every bucket ok.
    for (int it = kKillStep + 1; it < 6; ++it) {
      const StepRun& n = runs[i][it];
      ASSERT_TRUE(n.end.ok()) << "rank " << i << " iteration " << it << ": " << n.end;
      EXPECT_EQ(n.out.world, 2);
      EXPECT_GE(n.out.epoch, 2u);
    }
  }
  EXPECT_EQ(runs[0].back().out.step, runs[1].back().out.step);
}

TEST(AgentBucketsTest, PerBucketAlgorithmsAndRulesReachTheCallsAndTheReports) {
  testing::FakeJobConfig job = Job(2, "spardl");
  job.base.bucket_algorithms = {"", "topka"};
  testing::FakeCoordinator coordinator(job);
  testing::LoopbackPool pool;
  member::BucketRules rules;
  rules.start_iter = 2;
  rules.dense_probe_period = 4;
  std::vector<BucketBox> boxes;
  for (int i = 0; i < 2; ++i) {
    boxes.push_back(testing::MakeBucketAgent(coordinator, pool, absl::StrCat("a", i), rules));
  }
  std::vector<std::vector<StepRun>> runs(2);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      ASSERT_TRUE(boxes[i].agent->Start().ok());
      for (int it = 0; it < 6; ++it) runs[i].push_back(RunStep(boxes[i], i, it, nullptr));
    });
  }
  for (auto& t : threads) t.join();
  for (int it = 0; it < 6; ++it) {
    for (size_t b = 0; b < kSizes.size(); ++b) {
      // Step 3 probes: each bucket's own algorithm runs, dense is timed beside.
      std::string want = it < 2 ? "dense-ring" : b == 1 ? "topka" : "spardl";
      std::vector<RankCall> calls;
      for (int i = 0; i < 2; ++i) {
        const StepRun& r = runs[i][it];
        ASSERT_TRUE(r.end.ok()) << r.end;
        EXPECT_EQ(r.outcomes[b].algorithm, want) << "step " << it << " bucket " << b;
        EXPECT_EQ(r.outcomes[b].dense_probe, it == 3);
        // Step 1 (warm-up, odd) times the planned sparse exchange beside
        // the dense one: the call's own result and residual are the dense
        // run's (consistent and conserved below).
        EXPECT_EQ(r.outcomes[b].sparse_probe, it == 1);
        if (it == 3 || it == 1) EXPECT_GT(r.outcomes[b].probe_seconds, 0.0);
        calls.push_back(CallOf(r, b));
      }
      EXPECT_TRUE(Consistent(calls));
      EXPECT_EQ(ConservationError(calls, false), 0.0);
    }
  }
  for (int i = 0; i < 200 && coordinator.reports_received() < 12; ++i) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  int checked = 0;
  for (const member::StepReport& r : coordinator.reports()) {
    if (!r.ok || r.step != 4) continue;
    ASSERT_EQ(r.buckets.size(), kSizes.size());
    EXPECT_EQ(r.buckets[0].algorithm, "spardl");
    EXPECT_EQ(r.buckets[1].algorithm, "topka");
    EXPECT_EQ(r.buckets[1].elements, kSizes[1]);
    EXPECT_GT(r.buckets[2].seconds, 0.0);
    EXPECT_FALSE(r.buckets[2].dense_probe);
    ++checked;
  }
  EXPECT_EQ(checked, 2);
  // A warm-up probe step reports the sparse exchange it timed.
  checked = 0;
  for (const member::StepReport& r : coordinator.reports()) {
    if (!r.ok || r.step != 1) continue;
    ASSERT_EQ(r.buckets.size(), kSizes.size());
    EXPECT_EQ(r.buckets[0].algorithm, "spardl");
    EXPECT_EQ(r.buckets[1].algorithm, "topka");
    EXPECT_FALSE(r.buckets[1].dense_probe);
    EXPECT_GT(r.buckets[1].seconds, 0.0);
    ++checked;
  }
  EXPECT_EQ(checked, 2);
  // A probe step reports the probe, the coordinator's dense sample.
  checked = 0;
  for (const member::StepReport& r : coordinator.reports()) {
    if (!r.ok || r.step != 3) continue;
    ASSERT_EQ(r.buckets.size(), kSizes.size());
    for (const member::StepReport::Bucket& b : r.buckets) {
      EXPECT_EQ(b.algorithm, "dense-ring");
      EXPECT_TRUE(b.dense_probe);
      EXPECT_GT(b.seconds, 0.0);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

// Ranks given different rules (the hook's arguments differ) run the lowest
// rank's, agreed at the epoch's entry: every rank runs the same algorithm
// for every bucket at every step, across a plan barrier (tau = 8), and
// every rank whose own rules differ counts each differing field once.
TEST(AgentBucketsTest, DifferentRulesOnEachRankRunTheLowestRanks) {
  testing::FakeJobConfig job = Job(3, "spardl");
  job.base.step_deadline = milliseconds(3000);
  testing::FakeCoordinator coordinator(job);
  testing::LoopbackPool pool;
  std::vector<member::BucketRules> rules(3);
  rules[0].start_iter = 2;
  rules[0].dense_probe_period = 4;
  rules[1].start_iter = 5;
  rules[2].dense_probe_period = 3;
  rules[2].min_compression_rate = 1.5;
  std::vector<BucketBox> boxes;
  for (int i = 0; i < 3; ++i) {
    boxes.push_back(testing::MakeBucketAgent(coordinator, pool, absl::StrCat("a", i), rules[i]));
  }
  constexpr int kSteps = 11;
  std::vector<std::vector<StepRun>> runs(3);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      ASSERT_TRUE(boxes[i].agent->Start().ok());
      for (int it = 0; it < kSteps; ++it) runs[i].push_back(RunStep(boxes[i], i, it, nullptr));
    });
  }
  for (auto& t : threads) t.join();
  int lowest = -1;
  for (int i = 0; i < 3; ++i) {
    if (boxes[i].agent->rank() == 0) lowest = i;
  }
  ASSERT_GE(lowest, 0);
  const member::BucketRules& agreed = rules[lowest];
  for (int i = 0; i < 3; ++i) {
    const pipeline::Agent& a = *boxes[i].agent;
    EXPECT_TRUE(a.rules() == agreed) << "agent " << i;
    const uint64_t fields = (rules[i].start_iter != agreed.start_iter) +
                            (rules[i].min_compression_rate != agreed.min_compression_rate) +
                            (rules[i].dense_probe_period != agreed.dense_probe_period);
    EXPECT_EQ(a.rules_disagreements(), fields) << "agent " << i << ": once per field";
  }
  for (int it = 0; it < kSteps; ++it) {
    // What the lowest rank's rules give (plan: spardl on every bucket).
    const uint64_t step = runs[0][it].out.step;
    member::Plan plan;
    plan.algorithm = "spardl";
    plan.density = 0.05;
    for (size_t b = 0; b < kSizes.size(); ++b) {
      const member::BucketChoice want =
          member::ChooseBucketAlgorithm(plan, agreed, step, static_cast<uint32_t>(b), kSizes[b]);
      std::vector<RankCall> calls;
      for (int i = 0; i < 3; ++i) {
        const StepRun& r = runs[i][it];
        ASSERT_TRUE(r.end.ok()) << "agent " << i << " step " << it << ": " << r.end;
        EXPECT_EQ(r.out.step, step);
        EXPECT_EQ(r.outcomes[b].algorithm, want.algorithm) << "agent " << i << " step " << it;
        EXPECT_EQ(r.outcomes[b].dense_probe, want.dense_probe);
        calls.push_back(CallOf(r, b));
      }
      EXPECT_TRUE(Consistent(calls)) << "step " << it << " bucket " << b;
      EXPECT_EQ(ConservationError(calls, false), 0.0);
    }
  }
}

TEST(AgentBucketsTest, RulesOutOfBoundsAreRefusedAtStart) {
  testing::FakeCoordinator coordinator(Job(1, "spardl"));
  testing::LoopbackPool pool;
  member::BucketRules rules;
  rules.start_iter = member::kMaxRuleSteps + 1;
  BucketBox box = testing::MakeBucketAgent(coordinator, pool, "solo", rules);
  absl::Status s = box.agent->Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("start_iter"), std::string::npos) << s;
}

}  // namespace
}  // namespace gradex
