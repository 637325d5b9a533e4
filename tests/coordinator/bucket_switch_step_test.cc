// Where the coordinator publishes a bucket controller's decision: at the
// plan barrier at or after the deciding step + plan_lead_steps + one barrier
// period, whenever the tick that publishes it comes, so runs whose timings
// decide the same switch the same steps switch at the same step; only ranks
// already past that barrier move it to a later one. Nothing goes out when a
// report decides, and "auto"'s choice waits for every rank's link probe.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "services/coordinator/controllers/bucket_controller.h"
#include "services/coordinator/coordinator.h"
#include "services/coordinator/job_config.h"
#include "services/coordinator/validate.h"
#include "tests/coordinator/join_all.h"

namespace gradex::coordinator {
namespace {

const absl::Time t0 = absl::FromUnixSeconds(5000);

class BucketSwitchStep : public ::testing::Test {
 protected:
  void Start(const std::string& json) {
    absl::StatusOr<JobSettings> s = ParseJobConfig(json);
    ASSERT_TRUE(s.ok()) << s.status();
    s->lease = absl::Seconds(1000);
    c_ = std::make_unique<Coordinator>(*s, nullptr);
    ids_ = JoinAll(*c_, s->world_size, t0);
    ASSERT_EQ(ids_.size(), static_cast<size_t>(s->world_size));
    c_->Tick(t0);
    ASSERT_NE(c_->plan(), nullptr);
  }
  // Every rank reports `step`: a sparse run of 50 ms, or a dense probe of
  // 10 ms on odd steps; the step ends at t0 + step seconds.
  void Report(uint64_t step) {
    for (size_t r = 0; r < ids_.size(); ++r) {
      gradex::v1::StepReport rep;
      rep.set_member_id(ids_[r]);
      rep.set_epoch(c_->plan()->epoch());
      rep.set_step(step);
      gradex::v1::BucketReport* b = rep.add_buckets();
      b->set_elements(100000);
      b->set_algorithm(step % 2 ? "dense-ring" : "spardl");
      b->set_seconds(step % 2 ? 0.01 : 0.05);
      b->set_dense_probe(step % 2 == 1);
      ASSERT_TRUE(ValidateReport(rep).ok()) << ValidateReport(rep);
      bool accepted = false;
      ASSERT_TRUE(c_->Report(rep, Now(step), &accepted).ok());
      ASSERT_TRUE(accepted);
    }
  }
  // The ranks say they run `next` (as their heartbeats do between reports).
  void RanksAt(uint64_t next) {
    for (uint64_t id : ids_) {
      gradex::v1::HeartbeatRequest hb;
      hb.set_member_id(id);
      hb.set_epoch(c_->plan()->epoch());
      hb.set_next_step(next);
      ASSERT_TRUE(c_->Heartbeat(hb, Now(next)).ok());
    }
  }
  static absl::Time Now(uint64_t step) { return t0 + absl::Seconds(static_cast<double>(step)); }

  std::unique_ptr<Coordinator> c_;
  std::vector<uint64_t> ids_;
};

// Barriers every 8 steps, plan_lead_steps 8: the controller's two windows
// of 8 sparse runs (even steps) end at step 30, so its switch goes out from
// NextBarrier(30 + 8 + 8) = 48.
constexpr char kJob[] = R"({"job_id":"j","world_size":2,"algorithm":"spardl","density":0.01,
                             "barrier_period":8})";

TEST_F(BucketSwitchStep, TheSwitchGoesOutAtTheBarrierItsDecidingStepNames) {
  // The tick right after the deciding report, after the ranks ran on to
  // step 39, or to 40 (the last from which barrier 48 is still seen coming):
  // the same plan barrier.
  for (uint64_t ranks_at : {31u, 35u, 40u}) {
    Start(kJob);
    const uint64_t first = c_->plan()->version();
    for (uint64_t step = 0; step <= 30; ++step) Report(step);
    EXPECT_EQ(c_->plan()->version(), first) << "nothing goes out when a report decides";
    if (ranks_at > 31) RanksAt(ranks_at);
    c_->Tick(Now(ranks_at));
    auto p = c_->plan();
    ASSERT_GT(p->version(), first) << ranks_at;
    EXPECT_EQ(p->effective_step(), 48u) << ranks_at;
    ASSERT_EQ(p->bucket_algorithms_size(), 1);
    EXPECT_EQ(p->bucket_algorithms(0), "dense-ring");
    // Published once.
    c_->Tick(Now(ranks_at) + absl::Seconds(1));
    EXPECT_EQ(c_->plan()->version(), p->version());
  }
}

TEST_F(BucketSwitchStep, RanksPastThatBarrierGetTheNextOneTheyCanSeeComing) {
  Start(kJob);
  for (uint64_t step = 0; step <= 30; ++step) Report(step);
  RanksAt(41);
  c_->Tick(Now(41));
  EXPECT_EQ(c_->plan()->effective_step(), 56u);
  EXPECT_EQ(c_->plan()->bucket_algorithms(0), "dense-ring");
}

TEST_F(BucketSwitchStep, AutoChoosesOnceEveryRanksLinkIsIn) {
  Start(R"({"job_id":"j","world_size":4,"algorithm":"auto","density":0.01,
            "barrier_period":8})");
  const uint64_t first = c_->plan()->version();
  const int teams = c_->plan()->teams();
  // A bucket size the model prices differently on the stated default link
  // and on a slow one (1 ms per message, 100 Gbit/s).
  const controllers::BucketControllerOptions o;
  uint64_t n = 0;
  std::string by_default, by_links;
  for (uint64_t m = 1000; m <= 100000000 && n == 0; m *= 10) {
    by_default = controllers::CheapestAlgorithm(4, teams, m, 0.01, o.default_alpha, o.default_beta);
    by_links = controllers::CheapestAlgorithm(4, teams, m, 0.01, 1e-3, 8e-11);
    if (by_default != by_links) n = m;
  }
  ASSERT_NE(n, 0u);
  auto report = [&](int r, uint64_t step, bool link) {
    gradex::v1::StepReport rep;
    rep.set_member_id(ids_[r]);
    rep.set_epoch(c_->plan()->epoch());
    rep.set_step(step);
    gradex::v1::BucketReport* b = rep.add_buckets();
    b->set_elements(n);
    b->set_seconds(0.1);
    if (link) {
      rep.mutable_link()->set_alpha_seconds(r == 0 ? 1e-3 : 1e-5);
      rep.mutable_link()->set_beta_seconds_per_byte(8e-11);
      rep.mutable_link()->set_samples(3);
    }
    bool accepted = false;
    ASSERT_TRUE(c_->Report(rep, Now(step), &accepted).ok());
    ASSERT_TRUE(accepted);
  };
  auto bucket0 = [&] {
    auto p = c_->plan();
    return p->bucket_algorithms_size() == 0 ? p->algorithm() : p->bucket_algorithms(0);
  };
  // Step 0 completes with the slow rank's probe and two others, the last
  // rank's first report came without one: the default prices the bucket.
  for (int r = 0; r < 4; ++r) report(r, 0, r < 3);
  c_->Tick(Now(1));
  ASSERT_GT(c_->plan()->version(), first);
  EXPECT_EQ(c_->plan()->effective_step(), 16u) << "NextBarrier(0 + 8 + 8)";
  EXPECT_EQ(bucket0(), by_default);
  // Its probe comes with step 1: the maxima over all four, from the barrier
  // that step names.
  for (int r = 0; r < 4; ++r) report(r, 1, true);
  c_->Tick(Now(2));
  EXPECT_EQ(c_->plan()->effective_step(), 24u) << "NextBarrier(1 + 8 + 8)";
  EXPECT_EQ(bucket0(), by_links);
}

}  // namespace
}  // namespace gradex::coordinator
