// Ok-Topk with several buckets, as the agent runs it: one instance per bucket,
// the step's buckets sharing its training step.
#include <memory>
#include <string>
#include <vector>

#include "collectives/algorithms/oktopk/oktopk.h"
#include "gtest/gtest.h"
#include "tests/collectives/harness.h"

namespace gradex::testing {
namespace {

// The agent runs one Ok-Topk instance per bucket, with call ids step * B + b.
// τ and τ' count training steps (CallContext::training_step), so every bucket
// re-agrees its boundaries at every τ-th step and refreshes its thresholds
// at every τ'-th step; counted by call id, buckets 1 and 2 would re-agree at
// the wrong steps or never.
TEST(OkTopkTest, EveryBucketRefreshesWhenDue) {
  const int p = 3, buckets = 3, steps = 9;
  const size_t n = 4001;
  collectives::AllreduceOptions opt;
  opt.density = 0.02;
  const int tau = 4, tau_prime = 2;
  opt.params["oktopk_tau"] = tau;
  opt.params["oktopk_tau_prime"] = tau_prime;
  // [step][bucket] on rank 0.
  std::vector<std::vector<collectives::algorithms::oktopk::OkTopkCallInfo>> info(
      steps, std::vector<collectives::algorithms::oktopk::OkTopkCallInfo>(buckets));
  auto status = RunRanks(p, [&](int rank, transport::Transport& t) -> absl::Status {
    std::vector<std::unique_ptr<collectives::SparseAllreduce>> algos;
    std::vector<std::vector<float>> residual(buckets, std::vector<float>(n, 0.0f));
    for (int b = 0; b < buckets; ++b)
      algos.push_back(collectives::algorithms::oktopk::CreateOkTopk());
    for (int step = 0; step < steps; ++step) {
      for (int b = 0; b < buckets; ++b) {
        std::vector<float> grad = MakeGradient(21 + b, rank, step, n, Values::kGrid);
        collectives::CallContext ctx{&t,
                                     42,
                                     1,
                                     /*call_id=*/static_cast<uint64_t>(step * buckets + b),
                                     transport::DeadlineIn(std::chrono::seconds(20)),
                                     /*training_step=*/static_cast<uint64_t>(step)};
        collectives::AllreduceResult result;
        collectives::CallStats stats;
        absl::Status s = RunOrAbort(*algos[b], ctx, opt, grad, residual[b], &result, &stats);
        if (!s.ok()) return s;
        if (rank == 0) info[step][b] = *collectives::algorithms::oktopk::OkTopkLastCall(*algos[b]);
      }
    }
    return absl::OkStatus();
  });
  for (const auto& s : status) ASSERT_TRUE(s.ok()) << s;
  for (int step = 0; step < steps; ++step) {
    for (int b = 0; b < buckets; ++b) {
      SCOPED_TRACE("step " + std::to_string(step) + " bucket " + std::to_string(b));
      EXPECT_EQ(info[step][b].agreed, step % tau == 0);
      if (step % tau_prime == 0) {
        EXPECT_TRUE(info[step][b].local.exact);
        EXPECT_TRUE(info[step][b].global.exact);
      }
    }
  }
}

}  // namespace
}  // namespace gradex::testing
