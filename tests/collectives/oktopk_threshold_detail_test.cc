// Ok-Topk's call details local_threshold and global_threshold (exported as
// gradex_agent_call_detail): each is the magnitude the call selected at, so
// the local selection is exactly the accumulated entries at or above the
// local one, and every delivered result entry is at or above the global one.
#include <cmath>
#include <random>
#include <vector>

#include "collectives/algorithms/oktopk/oktopk.h"
#include "gtest/gtest.h"
#include "tests/collectives/harness.h"

namespace gradex::testing {
namespace {

TEST(OkTopkThresholdDetail, SelectionsAreAtOrAboveTheReportedThresholds) {
  const int world = 4, calls = 40;
  const size_t n = 20011;
  collectives::AllreduceOptions opt;
  opt.density = 0.01;
  std::vector<std::vector<int>> checked(world, std::vector<int>(2, 0));
  auto status = RunRanks(world, [&](int rank, transport::Transport& t) -> absl::Status {
    auto algo = collectives::algorithms::oktopk::CreateOkTopk();
    std::vector<float> residual(n, 0.0f);
    std::mt19937_64 rng(17 + rank);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int c = 0; c < calls; ++c) {
      std::vector<float> grad(n);
      for (float& g : grad) g = normal(rng);
      std::vector<float> acc(n);
      for (size_t i = 0; i < n; ++i) acc[i] = grad[i] + residual[i];
      collectives::CallContext ctx{&t,
                                   42,
                                   1,
                                   static_cast<uint64_t>(c),
                                   transport::DeadlineIn(std::chrono::seconds(20)),
                                   static_cast<uint64_t>(c)};
      collectives::AllreduceResult result;
      collectives::CallStats stats;
      absl::Status s = RunOrAbort(*algo, ctx, opt, grad, residual, &result, &stats);
      if (!s.ok()) return s;
      const double local = stats.Detail("local_threshold");
      const double global = stats.Detail("global_threshold");
      EXPECT_GT(local, 0) << "rank " << rank << " call " << c;
      EXPECT_GT(global, 0) << "rank " << rank << " call " << c;
      size_t at_or_above = 0;
      for (float a : acc) at_or_above += std::fabs(a) >= local;
      EXPECT_EQ(at_or_above, static_cast<size_t>(stats.Detail("local_selected")))
          << "rank " << rank << " call " << c;
      EXPECT_FALSE(result.is_dense);
      for (float v : result.sparse.val) {
        if (v != 0.0f) EXPECT_GE(std::fabs(v), global) << "rank " << rank << " call " << c;
      }
      checked[rank][collectives::algorithms::oktopk::OkTopkLastCall(*algo)->local.exact]++;
    }
    return absl::OkStatus();
  });
  for (const auto& s : status) EXPECT_TRUE(s.ok()) << s;
  // Both kinds of call were seen: exact refreshes and reused thresholds.
  EXPECT_GT(checked[0][0], 0);
  EXPECT_GT(checked[0][1], 0);
}

}  // namespace
}  // namespace gradex::testing
