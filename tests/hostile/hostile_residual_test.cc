// A NaN in a rank's residual that the selection does not send (no top-k
// picks a NaN; from a gradient, or a poisoned value received in an earlier
// call) is found by the accumulation pass, counted, reset to 0 and reported,
// and the residual is clean for every later call (before: the entries stayed
// NaN in the residual for every later step, those coordinates silently
// lost). A non-finite value the selection sends is summed like any value, as
// DDP's allreduce does (loss scalers skip such steps).
#include <chrono>
#include <cmath>
#include <limits>

#include "collectives/sparse_allreduce.h"
#include "gtest/gtest.h"
#include "tests/collectives/harness.h"

namespace gradex::testing {
namespace {

constexpr size_t kN = 1000;

bool AllFinite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

TEST(HostileResidual, NaNsLeftInTheResidualAreCountedResetAndNeverSent) {
  for (const char* algorithm : {"spardl", "topka", "spardl-bsag"}) {
    SCOPED_TRACE(algorithm);
    std::vector<std::vector<float>> residual(2, std::vector<float>(kN, 0.25f));
    for (size_t i : {10, 500, 999}) residual[0][i] = std::numeric_limits<float>::quiet_NaN();
    std::vector<std::vector<collectives::CallStats>> stats(2,
                                                           std::vector<collectives::CallStats>(3));
    std::vector<std::vector<std::vector<float>>> results(2, std::vector<std::vector<float>>(3));
    std::vector<absl::Status> st =
        RunRanks(2, [&](int rank, transport::Transport& t) -> absl::Status {
          absl::StatusOr<std::unique_ptr<collectives::SparseAllreduce>> algo =
              collectives::CreateAllreduce(algorithm);
          if (!algo.ok()) return algo.status();
          for (int call = 0; call < 3; ++call) {
            const std::vector<float> grad = MakeGradient(5, rank, call, kN, Values::kGrid);
            collectives::CallContext ctx{&t, 42, 1, static_cast<uint64_t>(call),
                                         transport::DeadlineIn(std::chrono::seconds(20))};
            collectives::AllreduceResult r;
            absl::Status s =
                RunOrAbort(**algo, ctx, {0.05, 1}, grad, residual[rank], &r, &stats[rank][call]);
            if (!s.ok()) return s;
            results[rank][call].assign(kN, 0.0f);
            r.ToDense(results[rank][call]);
          }
          return absl::OkStatus();
        });
    ASSERT_TRUE(st[0].ok()) << st[0];
    ASSERT_TRUE(st[1].ok()) << st[1];
    EXPECT_EQ(stats[0][0].Detail("residual_nonfinite"), 3);
    EXPECT_EQ(stats[0][0].Detail("residual_nonfinite_first"), 10);
    for (int call = 1; call < 3; ++call) EXPECT_EQ(stats[0][call].Detail("residual_nonfinite"), 0);
    EXPECT_EQ(stats[1][0].Detail("residual_nonfinite"), 0);
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_TRUE(AllFinite(residual[rank])) << "rank " << rank;
      for (int call = 0; call < 3; ++call) {
        EXPECT_TRUE(AllFinite(results[rank][call])) << "rank " << rank << " call " << call;
      }
    }
  }
}

TEST(HostileResidual, AnInfTheSelectionSendsIsSummedAsDdpWould) {
  for (const char* algorithm : {"spardl", "dense-ring"}) {
    SCOPED_TRACE(algorithm);
    std::vector<std::vector<float>> residual(2, std::vector<float>(kN, 0.0f));
    residual[0][321] = std::numeric_limits<float>::infinity();
    std::vector<collectives::CallStats> stats(2);
    std::vector<std::vector<float>> results(2, std::vector<float>(kN, 0.0f));
    std::vector<absl::Status> st =
        RunRanks(2, [&](int rank, transport::Transport& t) -> absl::Status {
          absl::StatusOr<std::unique_ptr<collectives::SparseAllreduce>> algo =
              collectives::CreateAllreduce(algorithm);
          if (!algo.ok()) return algo.status();
          const std::vector<float> grad = MakeGradient(5, rank, 0, kN, Values::kGrid);
          collectives::CallContext ctx{&t, 42, 1, 0,
                                       transport::DeadlineIn(std::chrono::seconds(20))};
          collectives::AllreduceResult r;
          absl::Status s =
              RunOrAbort(**algo, ctx, {0.05, 1}, grad, residual[rank], &r, &stats[rank]);
          if (s.ok()) r.ToDense(results[rank]);
          return s;
        });
    ASSERT_TRUE(st[0].ok()) << st[0];
    ASSERT_TRUE(st[1].ok()) << st[1];
    EXPECT_EQ(stats[0].Detail("residual_nonfinite"), 0);
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_EQ(results[rank][321], std::numeric_limits<float>::infinity()) << "rank " << rank;
      EXPECT_TRUE(AllFinite(residual[rank])) << "rank " << rank;
    }
  }
}

// Where the epoch refuses non-finite values (CallContext::refuse_nonfinite,
// the agents' agreed rule) every value summed is finite, so a non-finite
// result is a sum that overflowed (finite 3e38 from two ranks): the rank
// that computes it fails before sending it (so no honest rank is blamed for a
// bad frame), every rank fails the call and keeps grad + old residual
// exactly, and a rank that sees the overflow in its result names its own
// largest contribution. Before: the Inf was delivered as the result and with
// --check-invariants every honest agent exited.
TEST(HostileResidual, AnOverflowingSumFailsEveryRankAndKeepsItsContribution) {
  for (const char* algorithm : {"spardl", "dense-ring", "topka"}) {
    SCOPED_TRACE(algorithm);
    std::vector<std::vector<float>> residual(2, std::vector<float>(kN, 0.25f));
    std::vector<std::vector<float>> grads(2);
    for (int rank = 0; rank < 2; ++rank) {
      grads[rank] = MakeGradient(5, rank, 0, kN, Values::kGrid);
      grads[rank][77] = 3e38f;
    }
    std::vector<std::vector<float>> before = residual;
    std::vector<absl::Status> st =
        RunRanks(2, [&](int rank, transport::Transport& t) -> absl::Status {
          absl::StatusOr<std::unique_ptr<collectives::SparseAllreduce>> algo =
              collectives::CreateAllreduce(algorithm);
          if (!algo.ok()) return algo.status();
          collectives::CallContext ctx{&t, 42, 1, 0,
                                       transport::DeadlineIn(std::chrono::seconds(20))};
          ctx.refuse_nonfinite = true;
          collectives::AllreduceResult r;
          collectives::CallStats stats;
          return RunOrAbort(**algo, ctx, {0.05, 1}, grads[rank], residual[rank], &r, &stats);
        });
    int named = 0;
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_FALSE(st[rank].ok()) << "rank " << rank;
      // Nobody is blamed for a bad frame: the rank whose sum overflowed
      // stops before sending it.
      EXPECT_EQ(st[rank].message().find("bad frame"), std::string::npos) << st[rank];
      named += st[rank].code() == absl::StatusCode::kDataLoss &&
               st[rank].message().find("overflowed") != std::string::npos &&
               st[rank].message().find("element 77") != std::string::npos &&
               st[rank].message().find("largest contribution: |3e+38| at element 77") !=
                   std::string::npos;
      for (size_t i = 0; i < kN; ++i) {
        ASSERT_EQ(residual[rank][i], before[rank][i] + grads[rank][i])
            << "rank " << rank << " element " << i;
      }
    }
    EXPECT_GE(named, 1) << "no rank named the overflow";
  }
}

}  // namespace
}  // namespace gradex::testing
