// One dead-peer suite for every registered algorithm on every fabric (the
// failure contract of docs/design.md): a rank that dies before the call makes
// every survivor fail with an error well before its deadline, and each
// survivor keeps its whole contribution as residual (error feedback of
// quantized frames included: it is only committed with the call). The dead
// rank is an aborted one, as KillLoopbackRank and a crashed agent's closed
// connections look to its peers. Each case is one world of milliseconds, UCX
// included, so every fabric runs the same cases.
// A rank that never calls makes its peers fail at their deadline (loopback).
#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/collectives/harness.h"

namespace gradex::testing {
namespace {

constexpr size_t kN = 10007;

// A team count that exercises teams at P = 4 where the algorithm has them.
int TeamsAtFour(const std::string& algo) {
  auto a = collectives::CreateAllreduce(algo);
  EXPECT_TRUE(a.ok()) << a.status();
  return a.ok() && (*a)->traits().uses_teams ? 2 : 1;
}

struct Loss {
  int world;
  int victim;
  int teams;
  double density;
  int quantize_bits;
  float residual;  // every survivor's residual before the call

  std::string Str() const {
    return absl::StrCat("P=", world, " victim=", victim, " T=", teams, " density=", density,
                        " bits=", quantize_bits);
  }
};

std::vector<Loss> Losses(const std::string& algo) {
  const int teams = TeamsAtFour(algo);
  // A member of a team dies; the first rank (a tree's or a fold's root) dies
  // while dense phases are quantized.
  std::vector<Loss> out = {{4, 2, teams, 0.01, 0, 0.0f}, {5, 0, 1, 0.3, 4, 0.5f}};
  if (teams != 1) out.push_back({4, 2, 1, 0.01, 0, 0.0f});
  out.push_back({5, 2, 1, 0.01, 0, 0.0f});  // P = 5: a rank of the fold to 4
  out.push_back({5, 2, 1, 0.3, 4, 0.5f});
  return out;
}

double Seconds(transport::Clock::time_point since) {
  return std::chrono::duration<double>(transport::Clock::now() - since).count();
}

struct Param {
  std::string algo;
  Fabric fabric;
};

class DeadPeerTest : public ::testing::TestWithParam<Param> {};

TEST_P(DeadPeerTest, EverySurvivorFailsFastAndKeepsItsContribution) {
  const std::string algo = GetParam().algo;
  const auto deadline = std::chrono::seconds(3);
  for (const Loss& loss : Losses(algo)) {
    SCOPED_TRACE(loss.Str());
    std::vector<double> seconds(loss.world, 0.0);
    auto status = RunRanks(
        loss.world,
        [&](int rank, transport::Transport& t) -> absl::Status {
          if (rank == loss.victim) {
            t.Abort(transport::DeadlineIn(std::chrono::milliseconds(500)));
            return absl::OkStatus();
          }
          auto a = collectives::CreateAllreduce(algo);
          if (!a.ok()) return a.status();
          std::vector<float> grad = MakeGradient(1, rank, 0, kN, Values::kGrid);
          std::vector<float> residual(kN, loss.residual), expected(kN);
          for (size_t i = 0; i < kN; ++i) expected[i] = grad[i] + loss.residual;
          collectives::AllreduceOptions opt;
          opt.density = loss.density;
          opt.teams = loss.teams;
          opt.params["quantize_bits"] = loss.quantize_bits;
          collectives::AllreduceResult result;
          collectives::CallStats stats;
          const transport::Clock::time_point start = transport::Clock::now();
          collectives::CallContext ctx{&t, 42, 1, 0, transport::DeadlineIn(deadline)};
          absl::Status s = (*a)->Run(ctx, opt, grad, residual, &result, &stats);
          seconds[rank] = Seconds(start);
          // The owner of a failed call aborts the transport, as the agent
          // does, so peers still waiting on this rank fail now.
          if (!s.ok()) t.Abort(transport::DeadlineIn(std::chrono::milliseconds(500)));
          if (!s.ok() && residual != expected) return absl::InternalError("residual not restored");
          return s.ok() ? absl::InternalError("call succeeded without the victim") : s;
        },
        GetParam().fabric);
    for (int r = 0; r < loss.world; ++r) {
      if (r == loss.victim) continue;
      EXPECT_FALSE(status[r].ok()) << "rank " << r;
      EXPECT_NE(status[r].code(), absl::StatusCode::kInternal) << "rank " << r << ": " << status[r];
      EXPECT_FALSE(status[r].message().empty()) << "rank " << r;
      EXPECT_LT(seconds[r], 1.5) << "rank " << r << ": " << status[r];
    }
  }
}

class AbsentPeerTest : public ::testing::TestWithParam<std::string> {};

// Rank 3 of 4 never calls: a rank waiting on it times out at its deadline and
// aborts, which fails the others at once; nobody returns later than that.
TEST_P(AbsentPeerTest, TimesOutAtDeadline) {
  const std::string algo = GetParam();
  const int p = 4;
  auto start = transport::Clock::now();
  auto status = RunRanks(p, [&](int rank, transport::Transport& t) -> absl::Status {
    if (rank == 3) return absl::OkStatus();
    auto a = collectives::CreateAllreduce(algo);
    if (!a.ok()) return a.status();
    std::vector<float> grad = MakeGradient(1, rank, 0, kN, Values::kGrid);
    std::vector<float> residual(grad.size(), 0.0f);
    collectives::AllreduceResult result;
    collectives::CallStats stats;
    collectives::CallContext ctx{&t, 42, 1, 0,
                                 transport::DeadlineIn(std::chrono::milliseconds(800))};
    absl::Status s = (*a)->Run(ctx, {0.01, TeamsAtFour(algo)}, grad, residual, &result, &stats);
    if (!s.ok())
      t.Abort(transport::DeadlineIn(std::chrono::milliseconds(500)));  // as the owner does
    return s;
  });
  int timed_out = 0;
  for (int r = 0; r < 3; ++r) {
    EXPECT_FALSE(status[r].ok());
    timed_out += status[r].code() == absl::StatusCode::kDeadlineExceeded;
  }
  EXPECT_GE(timed_out, 1);
  EXPECT_LT(Seconds(start), 2.0);
}

std::vector<Param> Params() {
  std::vector<Param> out;
  for (Fabric f : kAllFabrics) {
    for (const std::string& algo : collectives::AllreduceNames()) out.push_back({algo, f});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(All, DeadPeerTest, ::testing::ValuesIn(Params()), [](const auto& info) {
  return FabricName(info.param.fabric) + "_" + TestName(info.param.algo);
});
INSTANTIATE_TEST_SUITE_P(Loopback, AbsentPeerTest,
                         ::testing::ValuesIn(collectives::AllreduceNames()), AlgorithmTestName);

}  // namespace
}  // namespace gradex::testing
