// The automatic team count: the α-β model against numbers worked by hand
// from Table 1's rows (bench/sim/cost_model.cc), the direction of the choice,
// the R-SAG preference, hysteresis, divisors only, and the per-epoch
// aggregation of the agents' link estimates.
#include "services/coordinator/controllers/team_choice.h"

#include <gtest/gtest.h>

namespace gradex::coordinator {
namespace {

// P=8, n=10^6, density 0.01: k = 10^4, 8 bytes per entry.
constexpr uint64_t kN = 1000000;
constexpr double kD = 0.01;

TEST(TeamChoiceTest, CostMatchesTable1RowsWorkedByHand) {
  const double a = 1e-5, b = 1e-9;
  // R-SAG T=2: Q=4, 2*2+1 = 5 messages; 2*(3/4)*8e4 + 1*8e4/4 = 140000 bytes.
  EXPECT_NEAR(controllers::SagSeconds("spardl-rsag", 8, kN, kD, 2, 0, a, b), 5e-5 + 1.4e-4, 1e-12);
  // B-SAG T=2 at the controller's start k' = k_block/2: Table1Cost's bytes_lo,
  // 120000 + 8e4/(4*2) = 130000; at k' = k_block its bytes_hi, 140000.
  EXPECT_NEAR(controllers::SagSeconds("spardl-bsag", 8, kN, kD, 2, 0, a, b), 5e-5 + 1.3e-4, 1e-12);
  EXPECT_NEAR(controllers::SagSeconds("spardl-bsag", 8, kN, kD, 2, 1.0, a, b), 5e-5 + 1.4e-4,
              1e-12);
  // The ratio is clamped to its range [1/T, 1].
  EXPECT_NEAR(controllers::SagSeconds("spardl-bsag", 8, kN, kD, 2, 0.1, a, b), 5e-5 + 1.3e-4,
              1e-12);
  // T=1: SparDL's own row, 2 log2(8) = 6 messages, 2*(7/8)*8e4 = 140000 bytes.
  EXPECT_NEAR(controllers::SagSeconds("spardl-rsag", 8, kN, kD, 1, 0, a, b), 6e-5 + 1.4e-4, 1e-12);
  // T=P: Q=1, 3 messages, log2(8)*8e4 = 240000 bytes.
  EXPECT_NEAR(controllers::SagSeconds("spardl-rsag", 8, kN, kD, 8, 0, a, b), 3e-5 + 2.4e-4, 1e-12);
  // B-SAG P=6, T=3: Q=2, 2*1+2 = 4 messages; 8e4 + 2*8e4*(1/3)/2 bytes.
  EXPECT_NEAR(controllers::SagSeconds("spardl-bsag", 6, kN, kD, 3, 0, a, b),
              4e-5 + (8e4 + 8e4 / 3) * 1e-9, 1e-12);
}

TEST(TeamChoiceTest, OnlyDivisorsWithRsagOnPowersOfTwo) {
  std::vector<controllers::TeamCandidate> c =
      controllers::TeamCandidates(12, kN, kD, 0, 1e-5, 1e-9);
  std::vector<int> teams;
  for (const auto& x : c) {
    teams.push_back(x.teams);
    const bool pow2 = (x.teams & (x.teams - 1)) == 0;
    EXPECT_EQ(x.algorithm, pow2 ? "spardl-rsag" : "spardl-bsag") << x.teams;
    EXPECT_GT(x.seconds, 0);
  }
  EXPECT_EQ(teams, (std::vector<int>{1, 2, 3, 4, 6, 12}));
  // A prime P has two divisors; P=1 one.
  c = controllers::TeamCandidates(7, kN, kD, 0, 1e-5, 1e-9);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[1].teams, 7);
  EXPECT_EQ(c[1].algorithm, "spardl-bsag");
  c = controllers::TeamCandidates(1, kN, kD, 0, 1e-5, 1e-9);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].teams, 1);
}

TEST(TeamChoiceTest, LatencyBoundChoosesMoreTeamsBandwidthBoundFewer) {
  const controllers::TeamChoice start{1, "spardl-rsag"};
  controllers::TeamDecision lat =
      controllers::DecideTeams(start, 8, kN, kD, 0, /*alpha=*/1e-3, /*beta=*/1e-12);
  EXPECT_TRUE(lat.changed);
  EXPECT_EQ(lat.choice.teams, 8);  // 3 messages instead of 6
  EXPECT_EQ(lat.choice.algorithm, "spardl-rsag");
  controllers::TeamDecision bw =
      controllers::DecideTeams(controllers::TeamChoice{8, "spardl-rsag"}, 8, kN, kD, 0, 1e-9, 1e-8);
  EXPECT_TRUE(bw.changed);
  EXPECT_EQ(bw.choice.teams, 2);  // 140000 bytes (T=1 too, but one message more)
  EXPECT_LT(bw.best_seconds, bw.current_seconds);
}

TEST(TeamChoiceTest, PowerOfTwoAndFewerTeamsWinTies) {
  // Free links: every candidate costs 0; T=1 (R-SAG) is kept or chosen.
  controllers::TeamDecision d =
      controllers::DecideTeams(controllers::TeamChoice{3, "spardl-bsag"}, 6, kN, kD, 0, 0, 0, 0.0);
  EXPECT_EQ(d.choice.teams, 3);  // no gain at all: kept
  EXPECT_FALSE(d.changed);
  d = controllers::DecideTeams(controllers::TeamChoice{4, "spardl-rsag"}, 6, kN, kD, 0, 0,
                               0);  // 4 does not divide 6
  EXPECT_TRUE(d.changed);
  EXPECT_EQ(d.choice.teams, 1);
  EXPECT_EQ(d.choice.algorithm, "spardl-rsag");
  // R-SAG on a non-power-of-two T is invalid and replaced.
  d = controllers::DecideTeams(controllers::TeamChoice{3, "spardl-rsag"}, 6, kN, kD, 0, 1e-5, 1e-9);
  EXPECT_TRUE(d.changed);
}

TEST(TeamChoiceTest, HysteresisKeepsTheCurrentUnderTenPercent) {
  const controllers::TeamChoice cur{2, "spardl-rsag"};
  // α = 2.5e-5, β = 1e-9: T=4 costs 2.60e-4 against T=2's 2.65e-4 (1.9%).
  controllers::TeamDecision d = controllers::DecideTeams(cur, 8, kN, kD, 0, 2.5e-5, 1e-9);
  EXPECT_FALSE(d.changed);
  EXPECT_EQ(d.choice.teams, 2);
  EXPECT_NEAR(d.best_seconds, 2.6e-4, 1e-12);
  // α = 1e-4: T=8 costs 5.4e-4 against 6.4e-4 (16%): switch.
  d = controllers::DecideTeams(cur, 8, kN, kD, 0, 1e-4, 1e-9);
  EXPECT_TRUE(d.changed);
  EXPECT_EQ(d.choice.teams, 8);
  // The current best is never changed.
  d = controllers::DecideTeams(controllers::TeamChoice{8, "spardl-rsag"}, 8, kN, kD, 0, 1e-4, 1e-9);
  EXPECT_FALSE(d.changed);
}

TEST(TeamChoiceTest, SingleAndPrimeWorlds) {
  controllers::TeamDecision d =
      controllers::DecideTeams(controllers::TeamChoice{1, "spardl-bsag"}, 1, kN, kD, 0, 1e-3, 1e-9);
  EXPECT_EQ(d.choice.teams, 1);
  d = controllers::DecideTeams(controllers::TeamChoice{1, "spardl-rsag"}, 7, kN, kD, 0, 1e-2,
                               1e-12);
  EXPECT_TRUE(d.changed);
  EXPECT_EQ(d.choice.teams, 7);
  EXPECT_EQ(d.choice.algorithm, "spardl-bsag");
}

TEST(TeamChoiceTest, AutoTeamsDecidesOnceOnTheSlowestLinks) {
  controllers::AutoTeams a;
  a.Reset(4);
  const controllers::TeamChoice cur{1, "spardl-rsag"};
  a.FeedBucket(kN, 0, 0);
  a.FeedLink(0, 1e-6, 1e-9);
  a.FeedLink(1, 1e-3, 1e-10);  // one slow-latency rank decides α
  a.FeedLink(1, 1e-9, 1e-9);   // a second estimate from a rank is ignored
  a.FeedLink(7, 1.0, 1.0);     // out of range
  a.FeedLink(2, 1e-6, 2e-9);
  EXPECT_FALSE(a.Decide(cur, kD).has_value());  // rank 3 missing
  a.FeedLink(3, 1e-6, 1e-9);
  EXPECT_DOUBLE_EQ(a.alpha(), 1e-3);
  EXPECT_DOUBLE_EQ(a.beta(), 2e-9);
  std::optional<controllers::TeamDecision> d = a.Decide(cur, kD);
  ASSERT_TRUE(d.has_value());
  EXPECT_TRUE(d->changed);
  EXPECT_EQ(d->choice.teams, 4);
  EXPECT_FALSE(a.Decide(cur, kD).has_value());  // once per epoch
  a.Reset(4);
  EXPECT_FALSE(a.complete());
}

}  // namespace
}  // namespace gradex::coordinator
