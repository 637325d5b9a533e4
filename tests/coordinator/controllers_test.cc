// The coordinator's controllers: B-SAG k' (step for step against the data
// plane's controller), stale feedback, Ok-Topk boundary consensus, the COVAP
// profiler, team choice, stall detection, and the job-config parser.
#include "services/coordinator/controllers/controllers.h"

#include <gtest/gtest.h>

#include <random>

#include "collectives/algorithms/bsag_controller.h"
#include "collectives/block_layout.h"
#include "services/coordinator/hangs/stall_detector.h"
#include "services/coordinator/job_config.h"

namespace gradex::coordinator {
namespace {

TEST(KPrime, SameSequenceAsTheDataPlaneController) {
  std::mt19937 rng(7);
  for (int teams : {2, 3, 4, 8}) {
    for (size_t k_block : {size_t{1}, size_t{7}, size_t{100}, size_t{5000}}) {
      gradex::collectives::algorithms::BsagController ref;
      catalog::KPrimeController mine(k_block, teams);
      for (int step = 0; step < 400; ++step) {
        ASSERT_EQ(mine.kprime(), ref.KPrime(k_block, teams))
            << teams << " " << k_block << " " << step;
        // u between k' and T*k' (disjoint .. identical team selections).
        size_t kp = ref.KPrime(k_block, teams);
        size_t u = kp + rng() % (kp * (teams - 1) + 1);
        ref.Update(u);
        mine.Update(u);
      }
    }
  }
}

TEST(KPrime, BlockKeepMatchesBlockLayout) {
  for (uint64_t n : {1u, 7u, 1000u, 10007u, 6250000u}) {
    for (int q : {1, 2, 3, 5}) {
      for (double d : {0.001, 0.01, 0.1, 1.0}) {
        gradex::collectives::BlockLayout layout(n, q, d);
        for (int b = 0; b < q; ++b) EXPECT_EQ(catalog::BlockKeep(n, q, b, d), layout.keep(b));
      }
    }
  }
}

TEST(KPrime, TableIgnoresStaleAndRepeatedFeedback) {
  controllers::KPrimeTable t;
  // P=4, T=2: q=2 positions; n=10000 -> block 5000, density 0.1 -> k_block 500.
  const uint64_t start = 250;                                   // ceil(500/2)
  EXPECT_TRUE(t.Feed(0, 10000, 1, start, 200, 10, 4, 2, 0.1));  // too few: grow
  auto v = t.Values();
  ASSERT_EQ(v.size(), 1u);
  const uint64_t next = v[0].second;
  EXPECT_GT(next, start);
  EXPECT_FALSE(t.Feed(0, 10000, 1, start, 900, 11, 4, 2, 0.1));  // ran the old k': ignored
  EXPECT_FALSE(t.Feed(0, 10000, 1, next, 900, 10, 4, 2, 0.1));   // same step again: ignored
  EXPECT_FALSE(t.Feed(0, 10000, 2, start, 900, 12, 4, 2, 0.1));  // no such position
  EXPECT_EQ(t.Values()[0].second, next);
  t.Feed(0, 10000, 1, next, 900, 11, 4, 2, 0.1);  // too many: shrink
  EXPECT_LT(t.Values()[0].second, next + 100);
}

TEST(BoundaryConsensus, MeanOverAllRanksOnce) {
  controllers::BoundaryConsensus c(3);
  std::optional<controllers::AgreedRegions> done;
  EXPECT_TRUE(c.Feed(0, 0, 100, 64, {10, 50}, &done));
  EXPECT_FALSE(c.Feed(0, 0, 100, 64, {10, 50}, &done));  // a rank counts once
  EXPECT_FALSE(c.Feed(1, 0, 100, 64, {10}, &done));      // wrong length for P=3
  EXPECT_TRUE(c.Feed(1, 0, 100, 64, {20, 60}, &done));
  EXPECT_FALSE(done.has_value());
  EXPECT_TRUE(c.Feed(2, 0, 100, 64, {31, 71}, &done));
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->boundaries, (std::vector<uint32_t>{0, 20, 60, 100}));  // floor(61/3) = 20
  EXPECT_EQ(done->from_step, 64u);
}

TEST(Teams, DivisorsAndRsagPreference) {
  EXPECT_EQ(controllers::ChooseTeams("spardl-bsag", 3, 6, false).teams, 3);
  EXPECT_EQ(controllers::ChooseTeams("spardl-bsag", 3, 5, false).teams, 1);  // 5 is prime
  EXPECT_EQ(controllers::ChooseTeams("spardl-bsag", 4, 6, false).teams, 3);
  auto c = controllers::ChooseTeams("spardl-bsag", 4, 8, true);
  EXPECT_EQ(c.teams, 4);
  EXPECT_EQ(c.algorithm, "spardl-rsag");
  c = controllers::ChooseTeams("spardl-rsag", 3, 6, false);
  EXPECT_EQ(c.algorithm, "spardl-bsag");  // R-SAG cannot run 3 teams
  EXPECT_EQ(controllers::ChooseTeams("oktopk", 4, 8, true).algorithm, "oktopk");
}

TEST(StallDetector, ReportsOncePerFrontierAfterTheDeadline) {
  hangs::StallDetector d(absl::Seconds(1));
  absl::Time t = absl::FromUnixSeconds(50);
  int behind = 0;
  EXPECT_FALSE(d.Check({5, 5, 5}, t, &behind));
  EXPECT_FALSE(d.Check({6, 5, 6}, t, &behind));
  EXPECT_FALSE(d.Check({6, 5, 6}, t + absl::Milliseconds(900), &behind));
  auto s = d.Check({6, 5, 6}, t + absl::Milliseconds(1100), &behind);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->step, 5u);
  EXPECT_EQ(s->ranks, (std::vector<int>{1}));
  EXPECT_EQ(behind, 1);
  EXPECT_FALSE(d.Check({6, 5, 6}, t + absl::Seconds(5), &behind));
  EXPECT_EQ(behind, 1);
}

// COVAP comes from the catalog: the job config accepts it and checks its
// interval as catalog data, naming the parameter when it is out of range.
TEST(JobConfig, AcceptsCovapAndBoundsItsInterval) {
  const std::string base = R"({"job_id":"j","world_size":4,"algorithm":"covap","density":0.01)";
  auto s = ParseJobConfig(base + "}");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->algorithm, "covap");
  auto four = ParseJobConfig(base + R"(,"params":{"covap_interval":4}})");
  ASSERT_TRUE(four.ok()) << four.status();
  EXPECT_EQ(four->params.at("covap_interval"), 4);
  for (const char* bad : {"0", "1025", "2.5"}) {
    auto b = ParseJobConfig(base + R"(,"params":{"covap_interval":)" + bad + "}}");
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_NE(b.status().message().find("covap_interval"), std::string::npos) << b.status();
  }
}

TEST(JobConfig, DefaultsAndErrors) {
  auto s = ParseJobConfig(R"({"job_id":"j","world_size":4,"algorithm":"spardl-bsag",
                              "density":0.01,"teams":2})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->min_world_size, 4);
  EXPECT_EQ(s->barrier_period, 64);
  EXPECT_TRUE(s->coordinate_kprime);
  EXPECT_EQ(s->covap_profile_steps, 16);
  auto z = ParseJobConfig(R"({"job_id":"j","world_size":1,"algorithm":"spardl","density":1,
                              "covap_profile_steps":0,"lease_ms":500})");
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(z->covap_profile_steps, 0);
  EXPECT_EQ(z->lease, absl::Milliseconds(500));
  for (const char* bad :
       {R"({"job_id":"j","world_size":4,"algorithm":"spardl","density":0.01,"typo":1})",
        R"({"job_id":"j/x","world_size":4,"algorithm":"spardl","density":0.01})",
        R"({"job_id":"j","world_size":0,"algorithm":"spardl","density":0.01})",
        R"({"job_id":"j","world_size":4,"algorithm":"nope","density":0.01})",
        // A parameter-server job without its model's layer sizes (ps_job_test).
        R"({"job_id":"j","world_size":4,"algorithm":"dgs","density":0.01})",
        R"({"job_id":"j","world_size":4,"algorithm":"spardl","density":0})",
        R"({"job_id":"j","world_size":4,"algorithm":"spardl","density":0.1,"teams":5})",
        R"({"job_id":"j","world_size":4,"algorithm":"spardl","density":0.1,"quantize_bits":3})",
        R"({"job_id":"j","world_size":4,"algorithm":"spardl","density":0.1,"lease_ms":5})",
        R"({"job_id":"j","world_size":4,"min_world_size":5,"algorithm":"spardl","density":0.1})",
        "{", "", "[1,2]", R"({"job_id":"j","world_size":"x"})"}) {
    auto r = ParseJobConfig(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(LoadJobConfig("/nonexistent/job.json").status().code(), absl::StatusCode::kNotFound);
  // The refusal of an unknown name lists what the agents can run; dgs's
  // says what a parameter-server job lacks.
  auto nope = ParseJobConfig(R"({"job_id":"j","world_size":4,"algorithm":"nope","density":0.01})");
  EXPECT_NE(nope.status().message().find("spardl-bsag"), std::string::npos) << nope.status();
  EXPECT_NE(nope.status().message().find("dense-ring"), std::string::npos) << nope.status();
  auto dgs = ParseJobConfig(R"({"job_id":"j","world_size":4,"algorithm":"dgs","density":0.01})");
  EXPECT_NE(dgs.status().message().find("parameter-server"), std::string::npos) << dgs.status();
}

}  // namespace
}  // namespace gradex::coordinator
