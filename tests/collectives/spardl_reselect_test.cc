// Spar-Reduce-Scatter's local quotas (SrsLocalKeeps) and what they change:
// with spardl_full_reselect each re-selection cuts the top of a rank's whole
// accumulation plus what it received, so an entry the owner holds below its
// own top-keep still wins when the peers' sums push it over; with the
// paper's local keep it stays in the owner's residual. And with
// spardl_residual_home a cut sum the result does not deliver goes back to
// its contributors' residuals, where the paper keeps it at the rank that cut
// it.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "collectives/algorithms/sparse_steps.h"
#include "collectives/block_layout.h"
#include "collectives/sparse_allreduce.h"
#include "tests/collectives/harness.h"

namespace gradex {
namespace {

TEST(SrsLocalKeeps, OneKeepPerBagThatArrivesBeforeTheBlockLeaves) {
  // q = 4: bags of blocks me+2, me+3 leave at step 1 (me, me+1 arrive);
  // block me+1 leaves at step 2 (me arrives); me is kept.
  const collectives::BlockLayout four(40000, 4, 0.01);  // keep 100 each
  EXPECT_EQ(collectives::algorithms::SrsLocalKeeps(four, 0),
            (std::vector<size_t>{300, 200, 100, 100}));
  EXPECT_EQ(collectives::algorithms::SrsLocalKeeps(four, 2),
            (std::vector<size_t>{100, 100, 300, 200}));
  // q = 2: the other block leaves at once.
  EXPECT_EQ(collectives::algorithms::SrsLocalKeeps(collectives::BlockLayout(20000, 2, 0.01), 1),
            (std::vector<size_t>{100, 200}));
  // q = 3: block me+2 leaves at step 1, me+1 at step 2; only me arrives.
  EXPECT_EQ(collectives::algorithms::SrsLocalKeeps(collectives::BlockLayout(30000, 3, 0.01), 0),
            (std::vector<size_t>{300, 100, 100}));
  // q = 8: me gets a bag every step (4), me+1 two (steps 1, 2), me+2 and
  // me+3 one (step 1), the rest none.
  EXPECT_EQ(collectives::algorithms::SrsLocalKeeps(collectives::BlockLayout(80000, 8, 0.01), 0),
            (std::vector<size_t>{400, 300, 200, 200, 100, 100, 100, 100}));
  // Capped at the block's size.
  EXPECT_EQ(collectives::algorithms::SrsLocalKeeps(collectives::BlockLayout(40, 4, 0.5), 0),
            (std::vector<size_t>{10, 10, 5, 5}));
}

// One spardl call (or `algorithm` with `teams`) on 4 ranks of 400 elements
// at density 0.05 (keep 5 a block of 4), equal blocks, no threshold reuse,
// `param` set to `value`; rank r
// gives grad(r). Every rank's call, checked consistent and conserved.
std::vector<testing::RankCall> OneCall(const std::string& param, int value,
                                       const std::function<std::vector<float>(int)>& grad,
                                       const std::string& algorithm = "spardl", int teams = 1) {
  constexpr int kWorld = 4;
  std::vector<testing::RankCall> calls(kWorld);
  std::vector<absl::Status> st = testing::RunRanks(kWorld, [&](int rank, transport::Transport& t) {
    auto algo = collectives::CreateAllreduce(algorithm);
    if (!algo.ok()) return algo.status();
    collectives::AllreduceOptions options;
    options.density = 0.05;
    options.threshold_reuse = false;
    options.teams = teams;
    options.params["spardl_balance_tau"] = 0;
    options.params[param] = value;
    testing::RankCall& c = calls[rank];
    c.grad = grad(rank);
    c.residual_in.assign(c.grad.size(), 0.0f);
    std::vector<float> residual = c.residual_in;
    collectives::CallContext ctx{&t, 42, 1, 0, transport::DeadlineIn(std::chrono::seconds(20)), 0};
    collectives::AllreduceResult result;
    c.status = testing::RunOrAbort(**algo, ctx, options, c.grad, residual, &result, &c.stats);
    c.residual_out = residual;
    c.result.assign(c.grad.size(), 0.0f);
    result.ToDense(c.result);
    return c.status;
  });
  for (const absl::Status& s : st) EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(testing::Consistent(calls));
  EXPECT_EQ(testing::ConservationError(calls, /*relative=*/false), 0.0);
  return calls;
}

// Rank 0 owns block 0 (n = 400, 4 ranks, density 0.05: keep 5 a block). Its
// own gradient there: 10 at elements 0..4, 8 at 5..9. Every other rank
// gives 1 at elements 5..9, which reach rank 0 summed to 3. The exact sum is
// 11 at 5..9 and 10 at 0..4.
TEST(SparDLFullReselect, TheOwnersSmallerEntriesCountWithThePeersSums) {
  for (int full : {0, 1}) {
    SCOPED_TRACE(::testing::Message() << "spardl_full_reselect " << full);
    const auto calls = OneCall("spardl_full_reselect", full, [](int rank) {
      std::vector<float> g(400, 0.0f);
      for (size_t i = 0; i < 10; ++i) {
        if (rank == 0) g[i] = i < 5 ? 10.0f : 8.0f;
        if (rank != 0 && i >= 5) g[i] = 1.0f;
      }
      return g;
    });
    ASSERT_EQ(calls[0].result.size(), 400u);
    const std::vector<float>& r = calls[0].result;
    for (size_t i = 0; i < 10; ++i) {
      if (full) {
        EXPECT_EQ(r[i], i < 5 ? 0.0f : 11.0f) << "element " << i;
      } else {
        // Rank 0 sent only its top 5 (the 10s); the 8s stayed home.
        EXPECT_EQ(r[i], i < 5 ? 10.0f : 0.0f) << "element " << i;
      }
    }
  }
}

// Rank 0 owns block 0 (n = 400, keep 5). It gives 10 at elements 0..4;
// ranks 1..3 give 1 at 20..24, which reach rank 0 summed to 3 and are cut
// there by its 10s.
TEST(SparDLResidualHome, ACutSumTheResultDoesNotDeliverGoesBackToItsContributors) {
  constexpr int kWorld = 4;
  for (int home : {0, 1}) {
    SCOPED_TRACE(::testing::Message() << "spardl_residual_home " << home);
    const auto calls = OneCall("spardl_residual_home", home, [](int rank) {
      std::vector<float> g(400, 0.0f);
      for (size_t i = 0; i < 5; ++i) {
        if (rank == 0) g[i] = 10.0f;
        if (rank != 0) g[20 + i] = 1.0f;
      }
      return g;
    });
    ASSERT_EQ(calls.size(), static_cast<size_t>(kWorld));
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(calls[0].result[i], 10.0f);
      EXPECT_EQ(calls[0].result[20 + i], 0.0f);
      for (int r = 0; r < kWorld; ++r) {
        const float want = home ? (r == 0 ? 0.0f : 1.0f) : (r == 0 ? 3.0f : 0.0f);
        EXPECT_EQ(calls[r].residual_out[20 + i], want) << "rank " << r << " element " << 20 + i;
      }
    }
  }
}

// Ranks 1 and 2 give +4 and -4 at elements 20..24: their sums cancel
// exactly. With the residuals sent home the cancelled sums must be delivered
// (as -0 on every rank) so that no rank keeps its part: a part sent home at
// a sum that cancels would come back at every call and never drain. In
// every variant, wherever the two parts meet (Spar-Reduce-Scatter or the
// team synchronisation).
TEST(SparDLResidualHome, ASumThatCancelsIsDeliveredAsZeroAndLeavesNoResidual) {
  constexpr int kWorld = 4;
  for (const auto& [algorithm, teams] : std::vector<std::pair<std::string, int>>{
           {"spardl", 1}, {"spardl-rsag", 2}, {"spardl-bsag", 2}, {"spardl-bsag", 4}}) {
    SCOPED_TRACE(::testing::Message() << algorithm << " teams " << teams);
    const auto calls = OneCall(
        "spardl_residual_home", 1,
        [](int rank) {
          std::vector<float> g(400, 0.0f);
          for (size_t i = 0; i < 5; ++i) {
            if (rank == 1) g[20 + i] = 4.0f;
            if (rank == 2) g[20 + i] = -4.0f;
            g[300 + 3 * rank + i % 2] = 1.0f;  // something else to deliver
          }
          return g;
        },
        algorithm, teams);
    ASSERT_EQ(calls.size(), static_cast<size_t>(kWorld));
    for (int r = 0; r < kWorld; ++r) {
      for (size_t i = 20; i < 25; ++i) {
        EXPECT_EQ(calls[r].result[i], 0.0f);
        EXPECT_TRUE(std::signbit(calls[r].result[i])) << "rank " << r << " element " << i;
        EXPECT_EQ(calls[r].residual_out[i], 0.0f) << "rank " << r << " element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace gradex
