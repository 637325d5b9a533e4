// The controllers as the published plan shows them: k' after post-gather
// counts, Ok-Topk regions and the COVAP interval at a plan barrier, the
// teams of a new epoch.
#include <gtest/gtest.h>

#include "services/coordinator/coordinator.h"
#include "tests/coordinator/join_all.h"

namespace gradex::coordinator {
namespace {

const absl::Time t0 = absl::FromUnixSeconds(5000);

class PlanTest : public ::testing::Test {
 protected:
  void Start(JobSettings s) {
    s.job_id = "job";
    s.min_world_size = s.world_size;
    s.lease = absl::Seconds(100);
    s.min_publish_interval = absl::ZeroDuration();
    c_ = std::make_unique<Coordinator>(s, nullptr);
    ids_ = JoinAll(*c_, s.world_size, t0);
    ASSERT_EQ(ids_.size(), static_cast<size_t>(s.world_size));
    c_->Tick(t0);
    ASSERT_NE(c_->plan(), nullptr);
  }
  void Report(const gradex::v1::StepReport& r) {
    bool accepted = false;
    ASSERT_TRUE(c_->Report(r, t0, &accepted).ok());
    ASSERT_TRUE(accepted);
  }
  gradex::v1::StepReport Base(int rank, uint64_t step) {
    gradex::v1::StepReport r;
    r.set_member_id(ids_[rank]);
    r.set_epoch(c_->plan()->epoch());
    r.set_step(step);
    return r;
  }

  std::unique_ptr<Coordinator> c_;
  std::vector<uint64_t> ids_;
};

TEST_F(PlanTest, KPrimeFollowsPostGatherCounts) {
  JobSettings s;
  s.world_size = 4;
  s.algorithm = "spardl-bsag";
  s.density = 0.1;
  s.teams = 2;
  s.coordinate_kprime = true;
  Start(s);
  EXPECT_EQ(c_->plan()->teams(), 2);
  EXPECT_EQ(c_->plan()->kprime_size(), 0);
  // n = 10000, q = 2: block 5000, k_block 500, k' starts at 250; u = 300
  // (too few) grows it.
  for (int rank : {0, 2}) {  // both holders of position 0 report the same u
    gradex::v1::StepReport r = Base(rank, 0);
    auto* b = r.add_buckets();
    b->set_elements(10000);
    b->set_team_position(0);
    b->set_kprime_used(250);
    b->set_post_gather_count(300);
    Report(r);
  }
  const uint64_t v = c_->plan()->version();
  c_->Tick(t0 + absl::Seconds(1));
  auto p = c_->plan();
  ASSERT_GT(p->version(), v);
  ASSERT_EQ(p->kprime_size(), 1);
  EXPECT_EQ(p->kprime(0).team_position(), 0);
  EXPECT_EQ(p->kprime(0).kprime(), 252u);  // step max(1, (500-250)/100) = 2
  EXPECT_EQ(p->effective_step(), 0u);      // k' needs no barrier
}

TEST_F(PlanTest, OkTopkRegionsAndCovapIntervalAtABarrier) {
  JobSettings s;
  s.world_size = 2;
  s.algorithm = "oktopk";
  s.coordinate_oktopk_regions = true;
  s.barrier_period = 64;
  s.plan_lead_steps = 10;
  Start(s);
  for (int rank = 0; rank < 2; ++rank) {
    gradex::v1::StepReport r = Base(rank, 64);
    auto* b = r.add_buckets();
    b->set_elements(1000);
    b->add_local_boundaries(rank == 0 ? 400 : 601);
    Report(r);
  }
  c_->Tick(t0);
  auto p = c_->plan();
  ASSERT_EQ(p->oktopk_regions_size(), 1);
  EXPECT_EQ(std::vector<uint32_t>(p->oktopk_regions(0).boundaries().begin(),
                                  p->oktopk_regions(0).boundaries().end()),
            (std::vector<uint32_t>{0, 500, 1000}));
  // Ranks are at step 65: the first barrier at least 10 steps ahead is 128.
  EXPECT_EQ(p->effective_step(), 128u);
}

TEST_F(PlanTest, CovapIntervalFromTheProfiler) {
  JobSettings s;
  s.world_size = 2;
  s.algorithm = "covap";
  s.covap_interval = 3;
  s.covap_profile_steps = 4;
  Start(s);
  EXPECT_EQ(c_->plan()->covap_interval(), 3);
  for (uint64_t step = 0; step < 4; ++step) {
    for (int rank = 0; rank < 2; ++rank) {
      gradex::v1::StepReport r = Base(rank, step);
      // Rank 0 waits 1 s for rank 1; the exchange itself is 0.45 s; compute
      // 0.1 s. The steps ran dense (the trainer's warm-up), so their time is
      // the uncompressed exchange COVAP's CCR is defined against (a COVAP
      // step's would count I times: ccr_profiler.h).
      gradex::v1::BucketReport* b = r.add_buckets();
      b->set_elements(1000);
      b->set_algorithm("dense-ring");
      const int64_t end = 1'000'000'000'000 + step * 10'000'000'000;
      r.set_comm_end_unix_ns(end);
      r.set_comm_start_unix_ns(end - (rank == 0 ? 1'450'000'000 : 450'000'000));
      r.set_compute_seconds(0.1);
      Report(r);
    }
  }
  c_->Tick(t0);
  auto p = c_->plan();
  EXPECT_NEAR(p->covap_ccr(), 4.5, 1e-6);
  EXPECT_EQ(p->covap_interval(), 5);
  EXPECT_EQ(p->effective_step() % 64, 0u);
}

TEST_F(PlanTest, StaleEpochReportsAreIgnored) {
  JobSettings s;
  s.world_size = 1;
  s.algorithm = "spardl";
  Start(s);
  gradex::v1::StepReport r = Base(0, 3);
  // An epoch never published is not stale but made up: refused.
  r.set_epoch(c_->plan()->epoch() + 5);
  bool accepted = true;
  EXPECT_EQ(c_->Report(r, t0, &accepted).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(accepted);
  r.set_member_id(12345);
  EXPECT_EQ(c_->Report(r, t0, &accepted).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace gradex::coordinator
