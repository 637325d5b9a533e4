// COVAP's CCR profiler on a real run: agents (loopback transport) run
// `covap` with the coordinator's logic in-process (coordinator_bridge.h);
// the trainer's computation between steps is a sleep, the exchange takes
// microseconds, so CCR is far below 1 and the profiler publishes
// covap_interval = 1 (from the configured 3) in a new plan effective at a
// plan barrier, and from that barrier on every rank runs that plan.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pipeline/agent.h"
#include "services/coordinator/job_config.h"
#include "tests/agent/coordinator_bridge.h"
#include "tests/agent/loopback_provider.h"
#include "tests/agent/pipeline_step.h"

namespace gradex {
namespace {

using std::chrono::milliseconds;

struct Box {
  testing::BridgedAgent a;
  std::unique_ptr<pipeline::BucketPipeline> pipeline;
  std::vector<uint64_t> plan_version;  // per step
  std::vector<std::string> ran;        // bucket 0's algorithm per step
};

TEST(CovapProfilerE2E, TheMeasuredIntervalIsPublishedAndRunFromABarrier) {
  absl::StatusOr<coordinator::JobSettings> s = coordinator::ParseJobConfig(
      R"({"job_id":"job","world_size":2,"algorithm":"covap","density":0.01,
          "barrier_period":4,"plan_lead_steps":4,"covap_interval":3,
          "covap_profile_steps":6,"step_deadline_ms":5000})");
  ASSERT_TRUE(s.ok()) << s.status();
  testing::CoordinatorHub hub(*s);
  ASSERT_EQ(hub.coordinator().plan(), nullptr);
  testing::LoopbackPool pool;
  std::vector<Box> boxes(2);
  for (int i = 0; i < 2; ++i) {
    Box& b = boxes[i];
    b.a = testing::MakeBridgedAgent(hub, pool, i);
    b.pipeline = testing::SequentialPipeline(b.a.agent.get());
  }
  const std::vector<size_t> sizes = {4000, 1000};
  constexpr int kSteps = 40;
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      Box& b = boxes[i];
      ASSERT_TRUE(b.a.agent->Start().ok());
      for (int step = 0; step < kSteps; ++step) {
        std::this_thread::sleep_for(milliseconds(15));  // the trainer's forward + backward
        std::vector<std::vector<float>> grads;
        for (size_t k = 0; k < sizes.size(); ++k) {
          grads.emplace_back(sizes[k], static_cast<float>(i + 1));
        }
        testing::PipelineStep r = testing::RunPipelineStep(*b.pipeline, grads);
        for (const pipeline::BucketEnd& e : r.buckets) ASSERT_TRUE(e.status.ok()) << e.status;
        ASSERT_TRUE(r.end.ok()) << r.end;
        const std::string ran0 = r.buckets[0].outcome.algorithm;
        const pipeline::StepOutcome& so = r.out;
        b.plan_version.push_back(so.plan_version);
        b.ran.push_back(ran0);
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(boxes[0].plan_version.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(boxes[1].plan_version.size(), static_cast<size_t>(kSteps));

  auto plan = hub.coordinator().plan();
  ASSERT_NE(plan, nullptr);
  ASSERT_EQ(plan->params().count("covap_interval"), 1u);
  EXPECT_EQ(plan->params().at("covap_interval"), 1) << "CCR " << plan->covap_ccr();
  EXPECT_GT(plan->covap_ccr(), 0);
  EXPECT_LT(plan->covap_ccr(), 1);
  const uint64_t from = plan->effective_step();
  EXPECT_EQ(from % 4, 0u) << "a plan barrier";
  EXPECT_GE(from, 6u) << "six complete steps are measured first";
  ASSERT_LT(from, static_cast<uint64_t>(kSteps));
  for (int i = 0; i < 2; ++i) {
    const Box& b = boxes[i];
    for (int step = 0; step < kSteps; ++step) {
      EXPECT_EQ(b.ran[step], "covap");
      const bool after = static_cast<uint64_t>(step) >= from;
      EXPECT_EQ(b.plan_version[step] >= plan->version(), after) << "rank " << i << " step " << step;
      // What the step ran with: the configured 3 before, the measured 1 after.
      std::shared_ptr<const member::Plan> ran = b.a.control->PlanVersion(b.plan_version[step]);
      ASSERT_NE(ran, nullptr);
      ASSERT_EQ(ran->params.count("covap_interval"), 1u);
      EXPECT_EQ(ran->params.at("covap_interval"), after ? 1 : 3)
          << "rank " << i << " step " << step;
    }
    EXPECT_EQ(b.a.control->reports_refused(), 0u);
  }
  EXPECT_EQ(boxes[0].plan_version, boxes[1].plan_version);
}

}  // namespace
}  // namespace gradex
