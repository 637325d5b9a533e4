// Per-bucket algorithms end to end. "Never slower than dense": real agents (loopback transport)
// report per-bucket times to the real coordinator logic (coordinator_bridge.h);
// bucket 0's sparse exchange is made slow deterministically (a test
// algorithm that sleeps on bucket 0), so its dense probes win; the
// coordinator publishes bucket 0 dense in a new plan, effective at a plan
// barrier, and from that barrier on every rank runs bucket 0 dense. "auto":
// the agents' link probes reach the coordinator, whose per-bucket choice
// every rank runs from a barrier.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "catalog/catalog.h"
#include "pipeline/agent.h"
#include "services/coordinator/controllers/bucket_controller.h"
#include "services/coordinator/job_config.h"
#include "tests/agent/coordinator_bridge.h"
#include "tests/agent/loopback_provider.h"
#include "tests/agent/pipeline_step.h"
#include "tests/collectives/test_dense_gather.h"

namespace gradex {
namespace {

using std::chrono::milliseconds;

constexpr char kSlow[] = "test-slow-sparse";
constexpr milliseconds kDelay(25);

GRADEX_CATALOG_ENTRY({.id = 60011,
                      .name = kSlow,
                      .description = "test only: a 'sparse' exchange that is slow on bucket 0",
                      .traits = {}});

// The test gather, sleeping before bucket 0's exchange.
class SlowOnBucketZero final : public gradex::testing::TestDenseGather {
 public:
  SlowOnBucketZero() : TestDenseGather(kSlow) {}

 protected:
  absl::Status CheckOptions(const collectives::CallContext& ctx,
                            const collectives::AllreduceOptions&) const override {
    if (ctx.bucket_index == 0) std::this_thread::sleep_for(kDelay);
    return absl::OkStatus();
  }
};

GRADEX_REGISTER_ALGORITHM(kSlow, [] { return std::make_unique<SlowOnBucketZero>(); });

const std::vector<size_t> kSizes = {2000, 500};

struct Box {
  testing::BridgedAgent a;
  std::unique_ptr<pipeline::BucketPipeline> pipeline;
  // Per step: what each bucket ran, whether bucket 0 ran as a probe, the
  // plan version the step ran under.
  std::vector<std::vector<std::string>> ran;
  std::vector<bool> probe;
  std::vector<uint64_t> plan_version;
};

// Two agents run `steps` steps of kSizes through `hub`'s coordinator,
// sleeping `pause` before each step (the trainer's computation).
void RunJob(testing::CoordinatorHub& hub, testing::LoopbackPool& pool,
            const member::BucketRules& rules, int steps, milliseconds pause,
            std::vector<Box>& boxes) {
  boxes.resize(2);
  for (int i = 0; i < 2; ++i) {
    Box& b = boxes[i];
    b.a = testing::MakeBridgedAgent(hub, pool, i, rules);
    b.pipeline = testing::SequentialPipeline(b.a.agent.get());
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      Box& b = boxes[i];
      ASSERT_TRUE(b.a.agent->Start().ok());
      for (int step = 0; step < steps; ++step) {
        std::this_thread::sleep_for(pause);
        std::vector<std::vector<float>> grads;
        for (size_t k = 0; k < kSizes.size(); ++k) {
          grads.emplace_back(kSizes[k], static_cast<float>(i + 1));
        }
        testing::PipelineStep r = testing::RunPipelineStep(*b.pipeline, grads);
        std::vector<std::string> ran;
        for (const pipeline::BucketEnd& e : r.buckets) {
          ASSERT_TRUE(e.status.ok()) << e.status;
          ran.push_back(e.outcome.algorithm);
        }
        const bool probe0 = r.buckets[0].outcome.dense_probe;
        ASSERT_TRUE(r.end.ok()) << r.end;
        const pipeline::StepOutcome& so = r.out;
        ASSERT_EQ(so.step, static_cast<uint64_t>(step));
        b.ran.push_back(std::move(ran));
        b.probe.push_back(probe0);
        b.plan_version.push_back(so.plan_version);
      }
    });
  }
  for (auto& t : threads) t.join();
}

TEST(BucketFallbackE2E, DenseProbesThatWinMakeTheBucketDenseFromABarrierOnEveryRank) {
  absl::StatusOr<coordinator::JobSettings> s = coordinator::ParseJobConfig(absl::StrCat(
      R"({"job_id":"job","world_size":2,"algorithm":")", kSlow,
      R"(","density":0.05,"barrier_period":4,"plan_lead_steps":4,"step_deadline_ms":5000})"));
  ASSERT_TRUE(s.ok()) << s.status();
  testing::CoordinatorHub hub(*s);
  member::BucketRules rules;
  rules.dense_probe_period = 4;  // steps 3, 7, 11, ...: every bucket's dense exchange timed
  constexpr int kSteps = 48;
  testing::LoopbackPool pool;
  std::vector<Box> boxes;  // destroyed first: the agents use the pool and the hub
  RunJob(hub, pool, rules, kSteps, milliseconds(0), boxes);
  ASSERT_EQ(boxes[0].ran.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(boxes[1].ran.size(), static_cast<size_t>(kSteps));

  auto plan = hub.coordinator().plan();
  ASSERT_NE(plan, nullptr);
  ASSERT_GE(plan->bucket_algorithms_size(), 1) << "the coordinator never switched bucket 0";
  EXPECT_EQ(plan->bucket_algorithms(0), "dense-ring");
  // Every rank ran the same thing at every step (agreed in-band).
  EXPECT_EQ(boxes[0].ran, boxes[1].ran);
  EXPECT_EQ(boxes[0].probe, boxes[1].probe);
  EXPECT_EQ(boxes[0].plan_version, boxes[1].plan_version);
  // The switch: the first step whose bucket 0 ran dense other than as a probe.
  int from = -1;
  for (int step = 0; step < kSteps && from < 0; ++step) {
    if (boxes[0].ran[step][0] == "dense-ring") from = step;
  }
  ASSERT_GE(from, 0) << "no rank ever ran bucket 0 dense by the plan";
  EXPECT_EQ(from % 4, 0) << "a plan barrier";
  // Three probes (steps 3, 7, 11) are needed first.
  EXPECT_GT(from, 11);
  EXPECT_GT(boxes[0].plan_version[from], boxes[0].plan_version[from - 1]) << "a new plan";
  for (int i = 0; i < 2; ++i) {
    const Box& b = boxes[i];
    for (int step = 0; step < kSteps; ++step) {
      if (step < from) {
        // Before the switch: the job's algorithm, also at a probe step (the
        // probe's dense exchange runs beside it).
        EXPECT_EQ(b.ran[step][0], kSlow) << "rank " << i << " step " << step;
        EXPECT_EQ(b.probe[step], step % 4 == 3) << "rank " << i << " step " << step;
      } else {
        // Dense: a dense bucket is not probed.
        EXPECT_EQ(b.ran[step][0], "dense-ring") << "rank " << i << " step " << step;
        EXPECT_FALSE(b.probe[step]) << "rank " << i << " step " << step;
      }
    }
    EXPECT_EQ(b.a.control->reports_refused(), 0u);
  }
}

TEST(BucketFallbackE2E, AutoRunsTheModelsChoicePerBucketFromABarrier) {
  absl::StatusOr<coordinator::JobSettings> s = coordinator::ParseJobConfig(
      R"({"job_id":"job","world_size":2,"algorithm":"auto","density":0.05,
          "barrier_period":4,"plan_lead_steps":4,"step_deadline_ms":5000})");
  ASSERT_TRUE(s.ok()) << s.status();
  // At P = 2 Table 1 prices topka cheapest whatever the link (one message,
  // k entries): the test does not depend on what loopback measures.
  for (double alpha : {1e-6, 1e-3}) {
    for (double beta : {1e-11, 1e-8}) {
      for (size_t n : kSizes) {
        ASSERT_EQ(coordinator::controllers::CheapestAlgorithm(2, 1, n, 0.05, alpha, beta), "topka");
      }
    }
  }
  testing::CoordinatorHub hub(*s);
  constexpr int kSteps = 40;
  testing::LoopbackPool pool;
  std::vector<Box> boxes;
  RunJob(hub, pool, member::BucketRules{}, kSteps, milliseconds(3), boxes);
  ASSERT_EQ(boxes[0].ran.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(boxes[1].ran.size(), static_cast<size_t>(kSteps));
  auto plan = hub.coordinator().plan();
  ASSERT_NE(plan, nullptr);
  EXPECT_TRUE(plan->measure_links());
  EXPECT_EQ(plan->algorithm(), catalog::DefaultAlgorithm());
  EXPECT_EQ(
      std::vector<std::string>(plan->bucket_algorithms().begin(), plan->bucket_algorithms().end()),
      (std::vector<std::string>{"topka", "topka"}));
  EXPECT_EQ(boxes[0].ran, boxes[1].ran);
  int from = -1;
  for (int step = 0; step < kSteps && from < 0; ++step) {
    if (boxes[0].ran[step][0] == "topka") from = step;
  }
  ASSERT_GT(from, 0) << "the first step runs before any report";
  EXPECT_EQ(from % 4, 0) << "a plan barrier";
  for (int step = 0; step < kSteps; ++step) {
    const std::string want = step < from ? std::string(catalog::DefaultAlgorithm()) : "topka";
    EXPECT_EQ(boxes[0].ran[step], (std::vector<std::string>{want, want})) << "step " << step;
  }
  EXPECT_EQ(boxes[0].a.control->reports_refused(), 0u);
}

}  // namespace
}  // namespace gradex
