// The bucket controller and COVAP's profiler inside the coordinator: step
// reports in, a plan version carrying bucket_algorithms / covap_interval out,
// effective at a plan barrier and published only on change; the job config's
// "auto" and a pinned covap_interval.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "services/coordinator/controllers/bucket_controller.h"
#include "services/coordinator/coordinator.h"
#include "services/coordinator/job_config.h"
#include "services/coordinator/validate.h"
#include "tests/coordinator/join_all.h"

namespace gradex::coordinator {
namespace {

const absl::Time t0 = absl::FromUnixSeconds(5000);

struct Bucket {
  uint64_t elements;
  std::string algorithm;
  double seconds;
  bool probe;
};

class CoordinatorBuckets : public ::testing::Test {
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
  gradex::v1::StepReport Make(int rank, uint64_t step, const std::vector<Bucket>& buckets) {
    gradex::v1::StepReport r;
    r.set_member_id(ids_[rank]);
    r.set_epoch(c_->plan()->epoch());
    r.set_step(step);
    for (size_t i = 0; i < buckets.size(); ++i) {
      gradex::v1::BucketReport* b = r.add_buckets();
      b->set_bucket(static_cast<uint32_t>(i));
      b->set_elements(buckets[i].elements);
      b->set_algorithm(buckets[i].algorithm);
      b->set_seconds(buckets[i].seconds);
      b->set_dense_probe(buckets[i].probe);
    }
    return r;
  }
  void Send(const gradex::v1::StepReport& r) {
    ASSERT_TRUE(ValidateReport(r).ok()) << ValidateReport(r);
    bool accepted = false;
    ASSERT_TRUE(c_->Report(r, t0 + absl::Seconds(r.step()), &accepted).ok());
    ASSERT_TRUE(accepted);
  }
  std::vector<std::string> Buckets() const {
    auto p = c_->plan();
    return {p->bucket_algorithms().begin(), p->bucket_algorithms().end()};
  }

  std::unique_ptr<Coordinator> c_;
  std::vector<uint64_t> ids_;
};

TEST_F(CoordinatorBuckets, ABucketWhoseDenseProbesWinRunsDenseFromABarrier) {
  Start(R"({"job_id":"j","world_size":2,"algorithm":"spardl","density":0.01,
            "barrier_period":8})");
  const uint64_t first = c_->plan()->version();
  EXPECT_TRUE(Buckets().empty());
  // Bucket 0: sparse 50 ms, dense probes 10 ms. Bucket 1: dense 500 ms.
  // Two full windows of 8 sparse runs (even steps) decide, at step 30.
  uint64_t step = 0;
  for (; step < 31; ++step) {
    const bool probe = step % 2 == 1;
    for (int r = 0; r < 2; ++r) {
      Send(Make(r, step,
                probe ? std::vector<Bucket>{{100000, "dense-ring", 0.01, true},
                                            {200000, "dense-ring", 0.5, true}}
                      : std::vector<Bucket>{{100000, "spardl", 0.05, false},
                                            {200000, "spardl", 0.05, false}}));
    }
  }
  c_->Tick(t0 + absl::Seconds(step));
  auto p = c_->plan();
  ASSERT_GT(p->version(), first);
  EXPECT_EQ(Buckets(), (std::vector<std::string>{"dense-ring"}));
  EXPECT_EQ(p->algorithm(), "spardl");
  EXPECT_GE(p->effective_step(), step);
  EXPECT_EQ(p->effective_step() % p->barrier_period(), 0u) << "a plan barrier";
  EXPECT_EQ(p->params_size(), 0) << "dense-ring and spardl take none";
  // The same evidence again: no new version.
  for (int r = 0; r < 2; ++r) Send(Make(r, step, {{100000, "dense-ring", 0.01, false}}));
  c_->Tick(t0 + absl::Seconds(step));
  EXPECT_EQ(c_->plan()->version(), p->version());
}

TEST_F(CoordinatorBuckets, AutoChoosesPerBucketFromTheMeasuredLinks) {
  Start(R"({"job_id":"j","world_size":4,"algorithm":"auto","density":0.01})");
  auto first = c_->plan();
  EXPECT_TRUE(c_->settings().auto_algorithm);
  EXPECT_EQ(first->algorithm(), catalog::DefaultAlgorithm());
  EXPECT_TRUE(first->measure_links()) << "the agents' probes feed the choice";
  EXPECT_TRUE(Buckets().empty()) << "no bucket sizes known yet";
  for (int r = 0; r < 4; ++r) {
    gradex::v1::StepReport rep = Make(r, 0, {{1000, "", 0.001, false}, {10000000, "", 0.1, false}});
    rep.mutable_link()->set_alpha_seconds(r == 2 ? 1e-3 : 1e-5);  // one slow rank
    rep.mutable_link()->set_beta_seconds_per_byte(8e-11);
    rep.mutable_link()->set_samples(3);
    Send(rep);
  }
  c_->Tick(t0 + absl::Seconds(1));
  std::vector<std::string> want;
  for (uint64_t n : {uint64_t{1000}, uint64_t{10000000}}) {
    const std::string a = controllers::CheapestAlgorithm(4, first->teams(), n, 0.01, 1e-3, 8e-11);
    want.push_back(a == first->algorithm() ? "" : a);
  }
  while (!want.empty() && want.back().empty()) want.pop_back();
  ASSERT_FALSE(want.empty()) << "the model picks something other than the default here";
  EXPECT_EQ(Buckets(), want);
  EXPECT_GT(c_->plan()->version(), first->version());
}

TEST(CoordinatorBucketsConfig, AutoIsAcceptedWithAnyCatalogParameter) {
  const std::string base = R"({"job_id":"j","world_size":4,"algorithm":"auto","density":0.01)";
  auto s = ParseJobConfig(base + R"(,"params":{"oktopk_tau":8}})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->params.at("oktopk_tau"), 8);
  EXPECT_FALSE(ParseJobConfig(base + R"(,"params":{"oktopk_tau":0}})").ok());
  EXPECT_FALSE(ParseJobConfig(base + R"(,"params":{"nonsense":1}})").ok());
  auto bad = ParseJobConfig(R"({"job_id":"j","world_size":4,"algorithm":"Auto","density":0.01})");
  EXPECT_NE(bad.status().message().find("auto"), std::string::npos) << bad.status();
}

gradex::v1::StepReport WithExchange(gradex::v1::StepReport r, double exchange, double compute) {
  r.set_comm_start_unix_ns(1000000000);
  r.set_comm_end_unix_ns(1000000000 + static_cast<int64_t>(exchange * 1e9));
  r.set_compute_seconds(compute);
  return r;
}

TEST_F(CoordinatorBuckets, CovapProfilerPublishesTheIntervalInTheParameters) {
  Start(R"({"job_id":"j","world_size":2,"algorithm":"covap","density":0.01,
            "barrier_period":8,"covap_profile_steps":4})");
  auto first = c_->plan();
  ASSERT_EQ(first->params().count("covap_interval"), 1u);
  EXPECT_EQ(first->params().at("covap_interval"), 3);  // the configured start
  // Under COVAP at I = 3 the exchange takes 0.2 s on the later rank (0.5 s
  // on the early one, which waited): uncompressed 0.6 s; compute 0.1 s ->
  // CCR 6 -> I = 6.
  uint64_t step = 0;
  for (; step < 3; ++step) {
    for (int r = 0; r < 2; ++r) {
      Send(WithExchange(Make(r, step, {{100000, "covap", 0.2, false}}), r == 0 ? 0.5 : 0.2, 0.1));
    }
  }
  c_->Tick(t0 + absl::Seconds(step));
  EXPECT_EQ(c_->plan()->version(), first->version()) << "4 steps needed";
  for (int r = 0; r < 2; ++r) {
    Send(WithExchange(Make(r, step, {{100000, "covap", 0.2, false}}), r == 0 ? 0.5 : 0.2, 0.1));
  }
  c_->Tick(t0 + absl::Seconds(++step));
  auto p = c_->plan();
  ASSERT_GT(p->version(), first->version());
  EXPECT_EQ(p->params().at("covap_interval"), 6);
  EXPECT_EQ(p->covap_interval(), 6);
  EXPECT_NEAR(p->covap_ccr(), 6.0, 1e-6);
  EXPECT_EQ(p->effective_step() % p->barrier_period(), 0u);
  // Dense probes count unscaled; a steady CCR republishes nothing.
  for (int r = 0; r < 2; ++r) {
    Send(WithExchange(Make(r, step, {{100000, "dense-ring", 0.6, true}}), 0.6, 0.1));
  }
  c_->Tick(t0 + absl::Seconds(++step));
  EXPECT_EQ(c_->plan()->version(), p->version());
}

TEST_F(CoordinatorBuckets, APinnedCovapIntervalIsNotProfiled) {
  Start(R"({"job_id":"j","world_size":1,"algorithm":"covap","density":0.01,
            "covap_profile_steps":1,"params":{"covap_interval":5}})");
  auto first = c_->plan();
  EXPECT_EQ(first->params().at("covap_interval"), 5);
  for (uint64_t step = 0; step < 4; ++step) {
    Send(WithExchange(Make(0, step, {{1000, "covap", 1, false}}), 1.0, 0.1));
  }
  c_->Tick(t0 + absl::Seconds(5));
  EXPECT_EQ(c_->plan()->version(), first->version());
  EXPECT_EQ(c_->plan()->params().at("covap_interval"), 5);
}

}  // namespace
}  // namespace gradex::coordinator

namespace gradex::coordinator {
namespace {

TEST(CoordinatorBucketsReport, BucketTimingsAreBoundedOnReceipt) {
  gradex::v1::StepReport r;
  r.set_member_id(1);
  r.set_epoch(1);
  gradex::v1::BucketReport* b = r.add_buckets();
  b->set_elements(10);
  b->set_algorithm("spardl");
  b->set_seconds(0.5);
  b->set_dense_probe(true);
  EXPECT_TRUE(ValidateReport(r).ok());
  for (double bad : {-1.0, std::nan(""), 1e6}) {
    b->set_seconds(bad);
    EXPECT_EQ(ValidateReport(r).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  b->set_seconds(0.5);
  b->set_algorithm(std::string(65, 'a'));
  EXPECT_EQ(ValidateReport(r).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gradex::coordinator
