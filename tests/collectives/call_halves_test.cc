// The call frame in two halves (SparseAllreduce::PrepareCall / ExchangeCall /
// AbandonCall, docs/architecture.md "The call frame"), for every catalog
// algorithm: a prepared call sends nothing and, abandoned, leaves grad + old
// residual exactly; prepared then exchanged, it gives the bits Run gives
// (results and residuals, over calls that carry algorithm state).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "collectives/sparse_allreduce.h"
#include "tests/collectives/harness.h"

namespace gradex::testing {
namespace {

constexpr int kWorld = 4;
constexpr size_t kN = 1003;
constexpr int kCalls = 3;

AllreduceOptions Opts() {
  AllreduceOptions o;
  o.density = 0.05;
  o.teams = 2;  // the SAG variants need teams; the others ignore them
  return o;
}

CallContext Ctx(Transport& t, int call) {
  CallContext ctx;
  ctx.transport = &t;
  ctx.job_id = 42;
  ctx.epoch = 1;
  ctx.call_id = static_cast<uint64_t>(call);
  ctx.training_step = static_cast<uint64_t>(call);
  ctx.deadline = DeadlineIn(std::chrono::milliseconds(10000));
  return ctx;
}

class CallHalvesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CallHalvesTest, APreparedCallSendsNothingAndAbandonedKeepsItAll) {
  std::vector<absl::Status> st = RunRanks(kWorld, [&](int rank, Transport& t) -> absl::Status {
    auto algo = CreateAllreduce(GetParam());
    if (!algo.ok()) return algo.status();
    const std::vector<float> grad = MakeGradient(7, rank, 0, kN, Values::kIntegers);
    const std::vector<float> old = MakeGradient(8, rank, 0, kN, Values::kIntegers);
    std::vector<float> residual = old;
    absl::Status s = (*algo)->PrepareCall(Ctx(t, 5), Opts(), grad, residual);
    if (!s.ok()) return s;
    EXPECT_TRUE((*algo)->call_pending());
    EXPECT_EQ(t.TotalCounters().sent_messages, 0u) << "the local part sends nothing";
    (*algo)->AbandonCall();
    EXPECT_FALSE((*algo)->call_pending());
    for (size_t i = 0; i < kN; ++i) {
      EXPECT_EQ(residual[i], old[i] + grad[i]) << "rank " << rank << " at " << i;
      if (residual[i] != old[i] + grad[i]) break;
    }
    // Nothing pending: the exchange half is refused and changes nothing.
    AllreduceResult result;
    CallStats stats;
    EXPECT_EQ((*algo)->ExchangeCall(&result, &stats).code(), absl::StatusCode::kFailedPrecondition);
    return absl::OkStatus();
  });
  for (const absl::Status& s : st) ASSERT_TRUE(s.ok()) << s;
}

TEST_P(CallHalvesTest, PreparedThenExchangedGivesRunsBits) {
  // [split?][rank][call]: result (dense) and residual after the call.
  std::vector<std::vector<float>> results[2][kWorld], residuals[2][kWorld];
  for (int split = 0; split < 2; ++split) {
    std::vector<absl::Status> st = RunRanks(kWorld, [&](int rank, Transport& t) -> absl::Status {
      auto algo = CreateAllreduce(GetParam());
      if (!algo.ok()) return algo.status();
      std::vector<float> residual(kN, 0.0f);
      for (int call = 0; call < kCalls; ++call) {
        const std::vector<float> grad = MakeGradient(9, rank, call, kN, Values::kIntegers);
        AllreduceResult result;
        CallStats stats;
        absl::Status s;
        if (split == 0) {
          s = RunOrAbort(**algo, Ctx(t, call), Opts(), grad, residual, &result, &stats);
        } else {
          s = (*algo)->PrepareCall(Ctx(t, call), Opts(), grad, residual);
          if (s.ok()) s = (*algo)->ExchangeCall(&result, &stats);
          if (!s.ok()) t.Abort(DeadlineIn(std::chrono::milliseconds(1000)));
        }
        if (!s.ok()) return s;
        std::vector<float> dense(kN, 0.0f);
        result.ToDense(dense);
        results[split][rank].push_back(std::move(dense));
        residuals[split][rank].push_back(residual);
      }
      return absl::OkStatus();
    });
    for (const absl::Status& s : st) ASSERT_TRUE(s.ok()) << s;
  }
  for (int rank = 0; rank < kWorld; ++rank) {
    EXPECT_EQ(results[1][rank], results[0][rank]) << "rank " << rank;
    EXPECT_EQ(residuals[1][rank], residuals[0][rank]) << "rank " << rank;
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, CallHalvesTest, ::testing::ValuesIn(AllreduceNames()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (c == '-') c = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace gradex::testing
