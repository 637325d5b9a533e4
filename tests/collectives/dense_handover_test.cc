// A dense exchange that finds a residual (left by a sparse algorithm before
// a switch to dense) sends it over handover_calls calls, an equal
// share each, instead of all in one step (SparseAllreduce::HandoverCalls).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "collectives/sparse_allreduce.h"
#include "tests/collectives/harness.h"

namespace gradex {
namespace {

constexpr int kWorld = 4;
constexpr size_t kN = 300;

// `calls` calls of `algorithm` on every rank, zero gradients, from a
// residual of small integers (rank r: (i % 7 - 3) * (r + 1)); per call, per
// rank.
std::vector<std::vector<testing::RankCall>> Drain(const std::string& algorithm, int steps,
                                                  int calls) {
  std::vector<std::vector<testing::RankCall>> out(calls, std::vector<testing::RankCall>(kWorld));
  std::vector<absl::Status> st = testing::RunRanks(kWorld, [&](int rank, Transport& t) {
    auto algo = CreateAllreduce(algorithm);
    if (!algo.ok()) return algo.status();
    AllreduceOptions options;
    options.density = 1.0;
    options.handover_calls = steps;
    std::vector<float> residual(kN);
    for (size_t i = 0; i < kN; ++i) residual[i] = static_cast<float>((int(i % 7) - 3) * (rank + 1));
    for (int c = 0; c < calls; ++c) {
      testing::RankCall& call = out[c][rank];
      call.grad.assign(kN, 0.0f);
      call.residual_in = residual;
      CallContext ctx{&t, 42, 1, static_cast<uint64_t>(c), DeadlineIn(std::chrono::seconds(20)), 0};
      AllreduceResult result;
      call.status =
          testing::RunOrAbort(**algo, ctx, options, call.grad, residual, &result, &call.stats);
      if (!call.status.ok()) return call.status;
      call.residual_out = residual;
      call.result.assign(kN, 0.0f);
      result.ToDense(call.result);
    }
    return absl::OkStatus();
  });
  for (const absl::Status& s : st) EXPECT_TRUE(s.ok()) << s;
  return out;
}

double L1(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += std::fabs(x);
  return s;
}

TEST(DenseHandover, AResidualGoesOutInEqualSharesAndNothingIsLeftAfterTheLastCall) {
  for (const std::string algorithm : {"dense-ring", "dense-rabenseifner"}) {
    SCOPED_TRACE(algorithm);
    const auto calls = Drain(algorithm, 4, 5);
    const double total = L1(calls[0][0].residual_in) * (1 + 2 + 3 + 4) / 1.0;
    for (size_t c = 0; c < calls.size(); ++c) {
      SCOPED_TRACE(::testing::Message() << "call " << c);
      EXPECT_TRUE(testing::Consistent(calls[c]));
      // Exact on the first call (quarters of integers); later shares are
      // not integers, and the dense sum rounds them as any allreduce would.
      EXPECT_LE(testing::ConservationError(calls[c], /*relative=*/true), c == 0 ? 0.0 : 1e-6);
      // Every rank's residual has the same sign pattern, so the sums add up:
      // a quarter of the whole per call, within float rounding, for 4 calls.
      const double sent = L1(calls[c][0].result);
      EXPECT_NEAR(sent, c < 4 ? total / 4 : 0.0, 1e-3 * total) << sent;
    }
    for (int r = 0; r < kWorld; ++r) {
      EXPECT_EQ(L1(calls[3][r].residual_out), 0.0) << "rank " << r;
      EXPECT_GT(L1(calls[2][r].residual_out), 0.0) << "rank " << r;
    }
  }
}

TEST(DenseHandover, ZeroStepsSendsTheWholeResidualAtOnce) {
  const auto calls = Drain("dense-ring", 0, 1);
  EXPECT_TRUE(testing::Consistent(calls[0]));
  EXPECT_EQ(testing::ConservationError(calls[0], /*relative=*/false), 0.0);
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(L1(calls[0][r].residual_out), 0.0);
}

}  // namespace
}  // namespace gradex
