// What the bucket pipeline's agent tests share (agent_buckets_test: one
// bucket after another; agent_pipeline_test: bucket b+1 selected while
// bucket b exchanges): three buckets of unequal sizes over an agent on
// loopback transports, and one rank's step recorded so that every bucket can
// be checked with the collectives' invariants (tests/collectives/harness.h).
#ifndef GRADEX_TESTS_AGENT_BUCKET_HARNESS_H_
#define GRADEX_TESTS_AGENT_BUCKET_HARNESS_H_

#include <barrier>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "pipeline/agent.h"
#include "pipeline/bucket_pipeline.h"
#include "tests/agent/loopback_provider.h"
#include "tests/collectives/harness.h"
#include "tests/fakes/fake_control_plane.h"

namespace gradex::testing {

// Odd sizes on purpose: no bucket splits evenly over 2 or 3 ranks.
inline const std::vector<size_t> kBucketSizes = {3001, 257, 1200};

struct BucketBox {
  std::unique_ptr<FakeControlPlane> control;
  std::unique_ptr<LoopbackProvider> transports;
  std::unique_ptr<pipeline::Agent> agent;
  std::unique_ptr<pipeline::BucketPipeline> pipeline;  // sums, every value as given
};

inline BucketBox MakeBucketAgent(FakeCoordinator& coordinator, LoopbackPool& pool,
                                 const std::string& id, member::BucketRules rules = {},
                                 bool pipelined = false) {
  BucketBox b;
  b.control = std::make_unique<FakeControlPlane>(&coordinator);
  b.transports = std::make_unique<LoopbackProvider>(&pool, "addr-" + id);
  pipeline::AgentOptions o = TestAgentOptions(id);
  o.rules = rules;
  b.agent = std::make_unique<pipeline::Agent>(o, b.control.get(), b.transports.get(), nullptr);
  pipeline::PipelineOptions p;
  p.mean = false;
  p.pipeline = pipelined;
  p.timeout = std::chrono::milliseconds(30000);
  b.pipeline = std::make_unique<pipeline::BucketPipeline>(b.agent.get(), p);
  return b;
}

// A short lease, so a dead peer is evicted within a test's time.
inline FakeJobConfig BucketJob(int world, const std::string& algorithm,
                               std::vector<std::string> bucket_algorithms = {}) {
  FakeJobConfig c;
  c.world_size = world;
  c.lease = std::chrono::milliseconds(400);
  c.base.algorithm = algorithm;
  c.base.bucket_algorithms = std::move(bucket_algorithms);
  c.base.density = 0.05;
  c.base.teams = 1;
  c.base.tau = 8;
  c.base.step_deadline = std::chrono::milliseconds(5000);
  return c;
}

// One rank's step: each bucket's status, outcome, gradient and residual
// before and after.
struct StepRun {
  absl::Status end;
  std::vector<absl::Status> buckets;
  std::vector<pipeline::BucketOutcome> outcomes;
  std::vector<std::vector<float>> grads, before, after;
  pipeline::StepOutcome out;
};

// Bucket b of one rank's step, as the invariant checks take it.
inline gradex::testing::RankCall CallOf(const StepRun& r, size_t b) {
  gradex::testing::RankCall c;
  c.grad = r.grads[b];
  c.residual_in = r.before[b];
  c.residual_out = r.after[b];
  c.result.assign(kBucketSizes[b], 0.0f);
  r.outcomes[b].result.ToDense(c.result);
  return c;
}

// Bucket b of a step that failed kept its gradient whole: residual after =
// residual before + gradient, exactly.
inline void ExpectKept(const StepRun& r, size_t b, int agent) {
  for (size_t j = 0; j < kBucketSizes[b]; ++j) {
    ASSERT_EQ(r.after[b][j], r.before[b][j] + r.grads[b][j])
        << "agent " << agent << " bucket " << b << " at " << j;
  }
}

// Every bucket's residual now (zeros for a bucket that has none yet).
inline std::vector<std::vector<float>> Residuals(pipeline::BucketPipeline& pipeline) {
  absl::StatusOr<pipeline::SpanState> s = pipeline.Export();
  EXPECT_TRUE(s.ok()) << s.status();
  std::vector<std::vector<float>> out;
  for (size_t b = 0; b < kBucketSizes.size(); ++b) {
    auto it = s.ok() ? s->residuals.find(b) : s->residuals.end();
    out.push_back(it != s->residuals.end() ? it->second
                                           : std::vector<float>(kBucketSizes[b], 0.0f));
  }
  return out;
}

// One rank's step through its bucket pipeline (each bucket b a span keyed
// b), `after_bucket(b)` called on the progress thread once bucket b is done.
inline StepRun RunPipelineStep(BucketBox& box, int rank, int iteration,
                               const std::function<void(size_t)>& after_bucket) {
  StepRun r;
  const size_t buckets = kBucketSizes.size();
  r.before = Residuals(*box.pipeline);
  r.outcomes.resize(buckets);
  r.buckets.resize(buckets);
  for (size_t b = 0; b < buckets; ++b) {
    r.grads.push_back(gradex::testing::MakeGradient(11 + b, rank, iteration, kBucketSizes[b],
                                                    gradex::testing::Values::kIntegers));
  }
  std::vector<std::future<pipeline::BucketEnd>> ends;
  for (size_t b = 0; b < buckets; ++b) {
    ends.push_back(box.pipeline->Submit({{b, kBucketSizes[b]}}, std::span<const float>(r.grads[b]),
                                        b + 1 == buckets,
                                        [&after_bucket, b](const pipeline::BucketEnd&) {
                                          if (after_bucket) after_bucket(b);
                                        }));
  }
  for (size_t b = 0; b < buckets; ++b) {
    pipeline::BucketEnd e = ends[b].get();
    r.buckets[b] = e.status;
    r.outcomes[b] = std::move(e.outcome);
    if (e.step_status) {
      r.end = *e.step_status;
      r.out = std::move(e.step_outcome);
    }
  }
  r.after = Residuals(*box.pipeline);
  return r;
}

// One rank's step, `after_bucket(b)` called once bucket b is done.
using BucketStepRunner = std::function<StepRun(BucketBox&, int rank, int iteration,
                                               const std::function<void(size_t)>& after_bucket)>;

// Three agents of `coordinator`'s job run `steps` steps through `run`; in
// step `kill_step`, once bucket 0 is done on every rank, rank 2's transport
// and control plane die (rank 2's steps end there). Returns each rank's
// steps.
inline std::vector<std::vector<StepRun>> RunKillingRank2(FakeCoordinator& coordinator,
                                                         int kill_step, int steps,
                                                         const BucketStepRunner& run,
                                                         bool pipelined = false) {
  LoopbackPool pool;
  std::vector<BucketBox> boxes;
  for (int i = 0; i < 3; ++i)
    boxes.push_back(MakeBucketAgent(coordinator, pool, "a" + std::to_string(i), {}, pipelined));
  std::barrier after_first(3);
  std::vector<std::vector<StepRun>> runs(3);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      pipeline::Agent& a = *boxes[i].agent;
      ASSERT_TRUE(a.Start().ok());
      for (int it = 0; it < steps; ++it) {
        auto hook = [&, i, it](size_t b) {
          if (it != kill_step || b != 0) return;
          after_first.arrive_and_wait();  // bucket 0 done on every rank
          if (i == 2) {
            transport::KillLoopbackRank(*a.transport(), a.rank());
            boxes[i].control->Crash();
          }
        };
        runs[i].push_back(run(boxes[i], i, it, hook));
        if (i == 2 && it == kill_step) return;
      }
    });
  }
  for (auto& t : threads) t.join();
  return runs;
}

}  // namespace gradex::testing

#endif  // GRADEX_TESTS_AGENT_BUCKET_HARNESS_H_
