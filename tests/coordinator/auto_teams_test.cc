// JobConfig.auto_teams end to end inside the coordinator: the plan asks for
// link probes, the ranks' estimates of the epoch choose T, and the change is
// published at a plan barrier; the config and report checks that guard it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "services/coordinator/coordinator.h"
#include "services/coordinator/job_config.h"
#include "services/coordinator/validate.h"
#include "tests/coordinator/join_all.h"

namespace gradex::coordinator {
namespace {

const absl::Time t0 = absl::FromUnixSeconds(5000);

class AutoTeamsTest : public ::testing::Test {
 protected:
  void Start(int world, int teams) {
    JobSettings s;
    s.job_id = "job";
    s.world_size = s.min_world_size = world;
    s.algorithm = "spardl-bsag";
    s.density = 0.01;
    s.teams = teams;
    s.auto_teams = true;
    s.coordinate_kprime = true;
    s.lease = absl::Seconds(100);
    s.min_publish_interval = absl::ZeroDuration();
    c_ = std::make_unique<Coordinator>(s, nullptr);
    ids_ = JoinAll(*c_, world, t0);
    ASSERT_EQ(ids_.size(), static_cast<size_t>(world));
    c_->Tick(t0);
    ASSERT_NE(c_->plan(), nullptr);
  }
  void Report(int rank, uint64_t step, double alpha, double beta) {
    gradex::v1::StepReport r;
    r.set_member_id(ids_[rank]);
    r.set_epoch(c_->plan()->epoch());
    r.set_step(step);
    gradex::v1::BucketReport* b = r.add_buckets();
    b->set_elements(1000000);
    gradex::v1::LinkEstimate* l = r.mutable_link();
    l->set_alpha_seconds(alpha);
    l->set_beta_seconds_per_byte(beta);
    l->set_samples(5);
    ASSERT_TRUE(ValidateReport(r).ok());
    bool accepted = false;
    ASSERT_TRUE(c_->Report(r, t0, &accepted).ok());
    ASSERT_TRUE(accepted);
  }

  std::unique_ptr<Coordinator> c_;
  std::vector<uint64_t> ids_;
};

TEST_F(AutoTeamsTest, LatencyBoundLinksSwitchTeamsAtABarrier) {
  Start(8, 2);
  auto first = c_->plan();
  EXPECT_TRUE(first->measure_links());
  EXPECT_EQ(first->teams(), 2);
  EXPECT_EQ(first->algorithm(), "spardl-rsag");  // auto_teams prefers R-SAG on 2^i
  // Seven of eight ranks: no decision yet.
  for (int r = 0; r < 7; ++r) Report(r, 5, r == 3 ? 1e-3 : 1e-6, 1e-12);
  c_->Tick(t0);
  EXPECT_EQ(c_->plan()->version(), first->version());
  Report(7, 5, 1e-6, 1e-12);
  c_->Tick(t0);
  auto p = c_->plan();
  ASSERT_GT(p->version(), first->version());
  // The slowest rank's α makes the exchange latency-bound: T = P.
  EXPECT_EQ(p->teams(), 8);
  EXPECT_EQ(p->algorithm(), "spardl-rsag");
  EXPECT_TRUE(p->measure_links());
  EXPECT_EQ(p->epoch(), first->epoch());
  EXPECT_GT(p->effective_step(), 5u);
  EXPECT_EQ(p->effective_step() % p->barrier_period(), 0u) << "a plan barrier";
  // Further reports of the epoch change nothing (one decision per epoch).
  Report(0, 6, 1e-9, 1e-6);
  c_->Tick(t0);
  EXPECT_EQ(c_->plan()->version(), p->version());
}

TEST_F(AutoTeamsTest, BandwidthBoundLinksKeepFewTeams) {
  Start(8, 8);
  EXPECT_EQ(c_->plan()->teams(), 8);
  for (int r = 0; r < 8; ++r) Report(r, 3, 1e-9, 1e-8);
  c_->Tick(t0);
  EXPECT_EQ(c_->plan()->teams(), 2);
  EXPECT_EQ(c_->plan()->effective_step() % c_->plan()->barrier_period(), 0u);
}

TEST(AutoTeamsConfig, OnlySagJobsAcceptAutoTeams) {
  auto ok = ParseJobConfig(R"({"job_id":"j","world_size":4,"algorithm":"spardl-bsag",
                               "density":0.01,"auto_teams":true})");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(ok->auto_teams);
  auto bad = ParseJobConfig(R"({"job_id":"j","world_size":4,"algorithm":"topka",
                                "density":0.01,"auto_teams":true})");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("auto_teams"), std::string::npos);
}

TEST(AutoTeamsValidate, LinkEstimateRanges) {
  gradex::v1::StepReport r;
  r.set_member_id(1);
  r.set_epoch(1);
  EXPECT_TRUE(ValidateReport(r).ok());  // absent: fine
  auto with = [&](double a, double b, uint32_t n) {
    gradex::v1::StepReport x = r;
    x.mutable_link()->set_alpha_seconds(a);
    x.mutable_link()->set_beta_seconds_per_byte(b);
    x.mutable_link()->set_samples(n);
    return ValidateReport(x).code();
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(with(1e-5, 1e-9, 3), absl::StatusCode::kOk);
  EXPECT_EQ(with(1e-5, 0, 1), absl::StatusCode::kOk);
  EXPECT_EQ(with(0, 1e-9, 3), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with(10, 1e-9, 3), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with(nan, 1e-9, 3), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with(1e-5, -1e-9, 3), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with(1e-5, 1e-3, 3), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with(1e-5, nan, 3), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with(1e-5, 1e-9, 0), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gradex::coordinator
