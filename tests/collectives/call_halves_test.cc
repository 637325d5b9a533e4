// The call frame in two halves (SparseAllreduce::PrepareCall / ExchangeCall /
// AbandonCall, docs/architecture.md "The call frame"), for every catalog
// algorithm: a prepared call sends nothing and, abandoned, leaves grad + old
// residual exactly; prepared then exchanged, it gives the bits Run gives
// (results and residuals, over calls that carry algorithm state).
#include <gtest/gtest.h>

#include <cstring>
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

collectives::AllreduceOptions Opts() {
  collectives::AllreduceOptions o;
  o.density = 0.05;
  o.teams = 2;  // the SAG variants need teams; the others ignore them
  return o;
}

collectives::CallContext Ctx(transport::Transport& t, int call) {
  collectives::CallContext ctx;
  ctx.transport = &t;
  ctx.job_id = 42;
  ctx.epoch = 1;
  ctx.call_id = static_cast<uint64_t>(call);
  ctx.training_step = static_cast<uint64_t>(call);
  ctx.deadline = transport::DeadlineIn(std::chrono::milliseconds(10000));
  return ctx;
}

class CallHalvesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CallHalvesTest, APreparedCallSendsNothingAndAbandonedKeepsItAll) {
  std::vector<absl::Status> st =
      RunRanks(kWorld, [&](int rank, transport::Transport& t) -> absl::Status {
        auto algo = collectives::CreateAllreduce(GetParam());
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
        collectives::AllreduceResult result;
        collectives::CallStats stats;
        EXPECT_EQ((*algo)->ExchangeCall(&result, &stats).code(),
                  absl::StatusCode::kFailedPrecondition);
        return absl::OkStatus();
      });
  for (const absl::Status& s : st) ASSERT_TRUE(s.ok()) << s;
}

TEST_P(CallHalvesTest, PreparedThenExchangedGivesRunsBits) {
  // [split?][rank][call]: result (dense) and residual after the call.
  std::vector<std::vector<float>> results[2][kWorld], residuals[2][kWorld];
  for (int split = 0; split < 2; ++split) {
    std::vector<absl::Status> st =
        RunRanks(kWorld, [&](int rank, transport::Transport& t) -> absl::Status {
          auto algo = collectives::CreateAllreduce(GetParam());
          if (!algo.ok()) return algo.status();
          std::vector<float> residual(kN, 0.0f);
          for (int call = 0; call < kCalls; ++call) {
            const std::vector<float> grad = MakeGradient(9, rank, call, kN, Values::kIntegers);
            collectives::AllreduceResult result;
            collectives::CallStats stats;
            absl::Status s;
            if (split == 0) {
              s = RunOrAbort(**algo, Ctx(t, call), Opts(), grad, residual, &result, &stats);
            } else {
              s = (*algo)->PrepareCall(Ctx(t, call), Opts(), grad, residual);
              if (s.ok()) s = (*algo)->ExchangeCall(&result, &stats);
              if (!s.ok()) t.Abort(transport::DeadlineIn(std::chrono::milliseconds(1000)));
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

// DGC's momentum correction handed to the call (fused into its first pass
// over the residual where the local part can) gives the bits of the same
// correction done first and its velocity passed as the gradient: results,
// residuals and velocities, over calls, at a momentum that rounds.
TEST_P(CallHalvesTest, MomentumInTheCallGivesTheBitsOfTheVelocityAsGradient) {
  constexpr float kM = 0.9f;
  std::vector<std::vector<float>> got[2][kWorld];  // [fused?][rank]: result, residual, velocity
  for (int fused = 0; fused < 2; ++fused) {
    std::vector<absl::Status> st =
        RunRanks(kWorld, [&](int rank, transport::Transport& t) -> absl::Status {
          auto algo = collectives::CreateAllreduce(GetParam());
          if (!algo.ok()) return algo.status();
          std::vector<float> residual(kN, 0.0f);
          std::vector<float> velocity = MakeGradient(4, rank, 0, kN, Values::kGrid);
          for (int call = 0; call < kCalls; ++call) {
            const std::vector<float> grad = MakeGradient(10, rank, call, kN, Values::kGrid);
            collectives::AllreduceResult result;
            collectives::CallStats stats;
            absl::Status s;
            if (fused == 1) {
              s = (*algo)->PrepareCall(Ctx(t, call), Opts(), grad, residual, velocity, kM);
            } else {
              for (size_t i = 0; i < kN; ++i) {
                const float mu = velocity[i] * kM;  // two roundings, as torch's mul_ then add_
                velocity[i] = mu + grad[i];
              }
              s = (*algo)->PrepareCall(Ctx(t, call), Opts(), velocity, residual);
            }
            if (s.ok()) s = (*algo)->ExchangeCall(&result, &stats);
            if (!s.ok()) {
              t.Abort(transport::DeadlineIn(std::chrono::milliseconds(1000)));
              return s;
            }
            std::vector<float> dense(kN, 0.0f);
            result.ToDense(dense);
            got[fused][rank].push_back(std::move(dense));
            got[fused][rank].push_back(residual);
            got[fused][rank].push_back(velocity);
          }
          return absl::OkStatus();
        });
    for (const absl::Status& s : st) ASSERT_TRUE(s.ok()) << s;
  }
  for (int rank = 0; rank < kWorld; ++rank) {
    ASSERT_EQ(got[0][rank].size(), got[1][rank].size());
    for (size_t v = 0; v < got[0][rank].size(); ++v) {
      const std::vector<float>& a = got[0][rank][v];
      const std::vector<float>& b = got[1][rank][v];
      ASSERT_EQ(a.size(), b.size());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
          << "rank " << rank << " call " << v / 3 << " "
          << (v % 3 == 0   ? "result"
              : v % 3 == 1 ? "residual"
                           : "velocity");
    }
  }
}

// Wherever the accumulation runs (fused into a selection's first pass, in
// the local part before it, or in the frame), a call on grad + residual gives
// what a call on the sum already made gives: the same results and residuals
// (equal as numbers: x + 0 turns -0 into +0), over calls.
TEST_P(CallHalvesTest, TheAccumulationGivesWhatAPreAccumulatedResidualGives) {
  if (GetParam() == "covap") {
    GTEST_SKIP() << "covap decays the old residual only (c * residual + grad): a gradient "
                    "added beforehand would decay with it";
  }
  std::vector<std::vector<float>> got[2][kWorld];  // [pre-accumulated?][rank]
  for (int pre = 0; pre < 2; ++pre) {
    std::vector<absl::Status> st =
        RunRanks(kWorld, [&](int rank, transport::Transport& t) -> absl::Status {
          auto algo = collectives::CreateAllreduce(GetParam());
          if (!algo.ok()) return algo.status();
          std::vector<float> residual = MakeGradient(12, rank, 0, kN, Values::kGrid);
          const std::vector<float> zeros(kN, 0.0f);
          for (int call = 0; call < kCalls; ++call) {
            const std::vector<float> grad = MakeGradient(13, rank, call, kN, Values::kGrid);
            if (pre == 1) {
              for (size_t i = 0; i < kN; ++i) residual[i] = residual[i] + grad[i];
            }
            collectives::AllreduceResult result;
            collectives::CallStats stats;
            absl::Status s = RunOrAbort(**algo, Ctx(t, call), Opts(), pre == 1 ? zeros : grad,
                                        residual, &result, &stats);
            if (!s.ok()) return s;
            std::vector<float> dense(kN, 0.0f);
            result.ToDense(dense);
            got[pre][rank].push_back(std::move(dense));
            got[pre][rank].push_back(residual);
          }
          return absl::OkStatus();
        });
    for (const absl::Status& s : st) ASSERT_TRUE(s.ok()) << s;
  }
  for (int rank = 0; rank < kWorld; ++rank) {
    ASSERT_EQ(got[0][rank].size(), got[1][rank].size());
    for (size_t v = 0; v < got[0][rank].size(); ++v) {
      EXPECT_EQ(got[0][rank][v], got[1][rank][v])
          << "rank " << rank << " call " << v / 2 << (v % 2 == 0 ? " result" : " residual");
    }
  }
}

// A velocity that does not match the gradient, or a momentum outside [0, 1),
// is refused before anything is touched.
TEST_P(CallHalvesTest, AMismatchedVelocityOrMomentumIsRefused) {
  std::vector<absl::Status> st =
      RunRanks(1, [&](int rank, transport::Transport& t) -> absl::Status {
        auto algo = collectives::CreateAllreduce(GetParam());
        if (!algo.ok()) return algo.status();
        const std::vector<float> grad(kN, 1.0f);
        std::vector<float> residual(kN, 0.0f), short_velocity(kN - 1, 0.0f), velocity(kN, 0.0f);
        EXPECT_EQ(
            (*algo)->PrepareCall(Ctx(t, 0), Opts(), grad, residual, short_velocity, 0.5f).code(),
            absl::StatusCode::kInvalidArgument);
        EXPECT_EQ((*algo)->PrepareCall(Ctx(t, 0), Opts(), grad, residual, velocity, 1.0f).code(),
                  absl::StatusCode::kInvalidArgument);
        EXPECT_FALSE((*algo)->call_pending());
        EXPECT_EQ(residual, std::vector<float>(kN, 0.0f));
        EXPECT_EQ(velocity, std::vector<float>(kN, 0.0f));
        return absl::OkStatus();
      });
  for (const absl::Status& s : st) ASSERT_TRUE(s.ok()) << s;
}

INSTANTIATE_TEST_SUITE_P(Algorithms, CallHalvesTest,
                         ::testing::ValuesIn(collectives::AllreduceNames()), AlgorithmTestName);

}  // namespace
}  // namespace gradex::testing
