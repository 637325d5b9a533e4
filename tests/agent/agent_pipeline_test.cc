// The bucket pipeline with its overlap on: bucket b+1 planned and prepared
// (PlanBucket / PrepareBucket: gradient into the residual, local selection)
// on the selection thread while bucket b exchanges (ExchangeBucket). Steps stay bitwise consistent
// and conserving; a peer that dies while the next bucket is prepared, and a preparation that fails,
// leave every later bucket's gradient in its residual exactly.
#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "catalog/catalog.h"
#include "collectives/residual_ledger.h"
#include "kernels/sparse.h"
#include "pipeline/agent.h"
#include "tests/agent/bucket_harness.h"
#include "tests/agent/loopback_provider.h"
#include "tests/collectives/harness.h"
#include "tests/collectives/test_dense_gather.h"
#include "tests/fakes/fake_control_plane.h"

namespace gradex {
namespace {

using gradex::testing::ConservationError;
using gradex::testing::Consistent;
using gradex::testing::MakeGradient;
using gradex::testing::RankCall;
using gradex::testing::Values;
using std::chrono::milliseconds;

constexpr char kFailing[] = "test-failing-selection";
// The call whose local part fails, and on which epoch rank (-1: none).
std::atomic<uint64_t> g_fail_call{0};
std::atomic<int> g_fail_rank{-1};
// Fail before the gradient is added: the frame must add it when unwinding.
std::atomic<bool> g_fail_early{false};

GRADEX_CATALOG_ENTRY({.id = 60021,
                      .name = kFailing,
                      .description = "test only: a dense gather whose local part can fail",
                      .traits = {.dense = true}});

// The test gather with a local part that, on the chosen call and rank, takes
// the top half of the accumulator out (as a selection does) and then fails,
// so the frame must put it back.
class FailingSelection final : public gradex::testing::TestDenseGather {
 public:
  FailingSelection() : TestDenseGather(kFailing) {}

 protected:
  absl::Status LocalSelection(const collectives::CallContext& ctx,
                              const collectives::AllreduceOptions&, collectives::LocalInput& in,
                              collectives::ResidualLedger& ledger,
                              collectives::CallStats*) override {
    if (ctx.call_id != g_fail_call.load() || ctx.transport->rank() != g_fail_rank.load()) {
      return absl::OkStatus();
    }
    if (g_fail_early.load()) return absl::InternalError("test: the local selection failed early");
    const std::span<float> acc = in.Accumulated();
    kernels::SparseVec taken;
    kernels::SelectTopKAndZero(acc.data(), acc.size(), acc.size() / 2, 0, &taken);
    ledger.Selected(taken);
    return absl::InternalError("test: the local selection failed");
  }
};

GRADEX_REGISTER_ALGORITHM(kFailing, [] { return std::make_unique<FailingSelection>(); });

using testing::BucketBox;
using testing::CallOf;
using testing::ExpectKept;
using testing::StepRun;
const std::vector<size_t>& kSizes = testing::kBucketSizes;

testing::FakeJobConfig Job(int world, std::vector<std::string> bucket_algorithms = {}) {
  return testing::BucketJob(world, "spardl", std::move(bucket_algorithms));
}

// One step through a pipelined box: bucket b+1 is planned and prepared on
// the selection thread while bucket b exchanges. `after_exchange(b)` runs on
// the progress thread once bucket b's exchange has returned.
StepRun RunPipelinedStep(BucketBox& box, int rank, int iteration,
                         const std::function<void(size_t)>& after_exchange) {
  return testing::RunPipelineStep(box, rank, iteration, after_exchange);
}

void ExpectStepsOk(const std::vector<std::vector<StepRun>>& runs, int from, int to) {
  for (int it = from; it < to; ++it) {
    for (size_t b = 0; b < kSizes.size(); ++b) {
      std::vector<RankCall> calls;
      for (const auto& rank_runs : runs) {
        const StepRun& r = rank_runs[it];
        ASSERT_TRUE(r.end.ok()) << "step " << it << ": " << r.end;
        ASSERT_TRUE(r.buckets[b].ok()) << r.buckets[b];
        calls.push_back(CallOf(r, b));
      }
      EXPECT_TRUE(Consistent(calls)) << "step " << it << " bucket " << b;
      EXPECT_EQ(ConservationError(calls, /*relative=*/false), 0.0) << "step " << it;
    }
  }
}

TEST(AgentPipelineTest, PeerDyingWhileTheNextBucketIsPreparedKeepsEveryLaterBucket) {
  testing::FakeCoordinator coordinator(Job(3));
  constexpr int kKillStep = 3;
  // Bucket 0 exchanged and bucket 1 prepared on every rank: rank 2 dies.
  std::vector<std::vector<StepRun>> runs =
      testing::RunKillingRank2(coordinator, kKillStep, 6, RunPipelinedStep, /*pipelined=*/true);
  ExpectStepsOk(runs, 0, kKillStep);
  for (int i : {0, 1}) {
    const StepRun& r = runs[i][kKillStep];
    ASSERT_TRUE(r.buckets[0].ok()) << r.buckets[0];
    EXPECT_FALSE(r.end.ok());
    EXPECT_NE(r.end.message().find("bucket 1"), std::string::npos) << r.end;
    for (size_t b = 1; b < kSizes.size(); ++b) {
      ASSERT_FALSE(r.buckets[b].ok());
      EXPECT_NE(r.buckets[b].message().find("bucket 1"), std::string::npos) << r.buckets[b];
      ExpectKept(r, b, i);  // bucket 1 prepared, bucket 2 prepared during bucket 1's failure
    }
    for (int it = kKillStep + 1; it < 6; ++it) {
      ASSERT_TRUE(runs[i][it].end.ok()) << "agent " << i << " step " << it << runs[i][it].end;
      EXPECT_EQ(runs[i][it].out.world, 2);
    }
  }
}

void RunFailedPreparation(bool early) {
  g_fail_early = early;
  // Bucket 1 runs the failing test gather; the others SparDL.
  testing::FakeCoordinator coordinator(Job(3, {"", kFailing, ""}));
  testing::LoopbackPool pool;
  std::vector<BucketBox> boxes;
  for (int i = 0; i < 3; ++i)
    boxes.push_back(testing::MakeBucketAgent(coordinator, pool, absl::StrCat("a", i), {}, true));
  // The failing step is the last: recovering needs every agent to re-join
  // (nobody died), which is the agent's epoch logic, not the pipeline's.
  constexpr int kFailStep = 2, kSteps = kFailStep + 1;
  std::vector<std::vector<StepRun>> runs(3);
  std::vector<int> failing(3, 0);
  std::barrier ready(3);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      pipeline::Agent& a = *boxes[i].agent;
      ASSERT_TRUE(a.Start().ok());
      for (int it = 0; it < kSteps; ++it) {
        if (it == kFailStep) {
          ready.arrive_and_wait();
          if (a.rank() == 1) {
            g_fail_rank = 1;
            g_fail_call = pipeline::CallId(a.next_step(), 1);
            failing[i] = 1;
          }
          ready.arrive_and_wait();
        }
        runs[i].push_back(RunPipelinedStep(boxes[i], i, it, nullptr));
      }
    });
  }
  for (auto& t : threads) t.join();
  g_fail_rank = -1;
  ExpectStepsOk(runs, 0, kFailStep);
  for (int i = 0; i < 3; ++i) {
    const StepRun& r = runs[i][kFailStep];
    // Bucket 0 exchanged while bucket 1 was (failing to be) prepared: ok.
    ASSERT_TRUE(r.buckets[0].ok()) << "agent " << i << ": " << r.buckets[0];
    EXPECT_FALSE(r.end.ok());
    for (size_t b = 1; b < kSizes.size(); ++b) {
      ASSERT_FALSE(r.buckets[b].ok()) << "agent " << i << " bucket " << b;
      ExpectKept(r, b, i);
    }
    if (failing[i]) {
      EXPECT_NE(r.end.message().find("the local selection failed"), std::string::npos) << r.end;
      EXPECT_EQ(r.end.message().find("failed early") != std::string::npos, early) << r.end;
      EXPECT_NE(r.end.message().find("before its exchange"), std::string::npos) << r.end;
    }
  }
  EXPECT_EQ(failing[0] + failing[1] + failing[2], 1);
}

TEST(AgentPipelineTest, AFailedPreparationKeepsItsBucketAndEveryLaterOne) {
  RunFailedPreparation(/*early=*/false);
}

// The local part fails before it added the gradient (LocalInput): the frame
// adds it while unwinding, so the bucket is still kept whole.
TEST(AgentPipelineTest, APreparationFailingBeforeItsAccumulationKeepsItsBucket) {
  RunFailedPreparation(/*early=*/true);
}

}  // namespace
}  // namespace gradex
