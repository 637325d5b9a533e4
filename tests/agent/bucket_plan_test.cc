// Plan.bucket_algorithms on the agent's side: the gRPC plan conversion
// refuses a list out of bounds (too many buckets, a name the catalog lacks)
// and the in-band barrier message carries the list in a bounded encoding
// that every receiver checks before use; so are the per-bucket rules
// (start_iter, min_compression_rate, dense_probe_period) it carries.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "catalog/bucket_algorithms.h"
#include "member/epoch_sync.h"
#include "member/grpc_messages.h"

namespace gradex {
namespace {

gradex::v1::Plan BasePlan() {
  gradex::v1::Plan m;
  m.set_version(7);
  m.set_epoch(1);
  m.set_algorithm("spardl");
  m.set_density(0.01);
  m.set_teams(1);
  m.set_barrier_period(4);
  m.set_step_deadline_ms(1000);
  return m;
}

member::SyncState State(std::vector<std::string> buckets) {
  member::SyncState s;
  s.next_step = 12;
  s.newest_epoch = 3;
  s.values.plan_version = 9;
  s.values.algorithm = "spardl";
  s.values.density = 0.01;
  s.values.bucket_algorithms = std::move(buckets);
  return s;
}

TEST(BucketPlan, PlanConversionCarriesAndBoundsTheList) {
  gradex::v1::Plan m = BasePlan();
  m.add_bucket_algorithms("");
  m.add_bucket_algorithms("dense-ring");
  m.add_bucket_algorithms("oktopk");
  // A parameter of a bucket's algorithm is one of the plan's parameters.
  (*m.mutable_params())["oktopk_tau"] = 8;
  absl::StatusOr<member::Plan> p = member::ToPlan(m, 0);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->bucket_algorithms, (std::vector<std::string>{"", "dense-ring", "oktopk"}));

  // A parameter of no algorithm in play, or out of its range: refused.
  gradex::v1::Plan stray = m;
  (*stray.mutable_params())["kprime"] = 3;
  EXPECT_EQ(member::ToPlan(stray, 0).status().code(), absl::StatusCode::kInvalidArgument);
  gradex::v1::Plan range = m;
  (*range.mutable_params())["oktopk_tau"] = 0;
  EXPECT_EQ(member::ToPlan(range, 0).status().code(), absl::StatusCode::kInvalidArgument);

  // A name the catalog lacks: the whole plan is refused, naming the bucket.
  gradex::v1::Plan unknown = BasePlan();
  unknown.add_bucket_algorithms("spardl");
  unknown.add_bucket_algorithms("no-such-algorithm");
  absl::StatusOr<member::Plan> u = member::ToPlan(unknown, 0);
  EXPECT_EQ(u.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(u.status().message().find("bucket 1"), std::string::npos) << u.status();

  // At most kMaxBucketAlgorithms entries.
  gradex::v1::Plan many = BasePlan();
  for (size_t i = 0; i < catalog::kMaxBucketAlgorithms; ++i) many.add_bucket_algorithms("");
  EXPECT_TRUE(member::ToPlan(many, 0).ok());
  many.add_bucket_algorithms("");
  EXPECT_EQ(member::ToPlan(many, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BucketPlan, BarrierValuesDropTrailingDefaultsAndOutOfBoundLists) {
  member::Plan p;
  p.algorithm = "spardl";
  p.bucket_algorithms = {"", "dense-ring", "", ""};
  EXPECT_EQ(member::BarrierValues::From(p, {}).bucket_algorithms,
            (std::vector<std::string>{"", "dense-ring"}));
  p.bucket_algorithms.assign(catalog::kMaxBucketAlgorithms + 1, "dense-ring");
  EXPECT_TRUE(member::BarrierValues::From(p, {}).bucket_algorithms.empty());
  member::Plan q;
  member::BarrierValues v;
  v.algorithm = "spardl";
  v.bucket_algorithms = {"dense-ring"};
  v.ApplyTo(&q);
  EXPECT_EQ(q.bucket_algorithms, v.bucket_algorithms);
}

TEST(BucketPlan, BarrierMessageRoundTripsTheLargestListInAFewKiB) {
  std::vector<std::string> buckets(catalog::kMaxBucketAlgorithms);
  for (size_t i = 0; i < buckets.size(); ++i) {
    buckets[i] = i % 3 == 0 ? "" : (i % 3 == 1 ? "dense-ring" : "oktopk");
  }
  const transport::Bytes b = member::EncodeSyncMessage(5, State(buckets));
  const transport::Bytes empty = member::EncodeSyncMessage(5, State({}));
  // One byte per bucket plus the two names.
  EXPECT_EQ(b.size(), empty.size() + buckets.size() + 2 + 10 + 6);
  EXPECT_LT(b.size(), 8u << 10);
  absl::StatusOr<member::SyncState> d = member::DecodeSyncMessage(b, 5, 1, 4);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->values.bucket_algorithms, buckets);
  EXPECT_EQ(d->next_step, 12u);
  absl::StatusOr<member::SyncState> e = member::DecodeSyncMessage(empty, 5, 1, 4);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE(e->values.bucket_algorithms.empty());
}

TEST(BucketPlan, BarrierMessageOutOfBoundsIsRefused) {
  const transport::Bytes empty = member::EncodeSyncMessage(5, State({}));
  const size_t section = empty.size() - 3;  // u16 count, u8 name count
  const transport::Bytes good =
      member::EncodeSyncMessage(5, State({"", "dense-ring", "dense-ring"}));
  ASSERT_TRUE(member::DecodeSyncMessage(good, 5, 0, 2).ok());
  auto refused = [](const transport::Bytes& b) {
    absl::StatusOr<member::SyncState> d = member::DecodeSyncMessage(b, 5, 0, 2);
    return !d.ok() && d.status().code() == absl::StatusCode::kDataLoss;
  };
  // A count over the bound (the indices present or not).
  transport::Bytes over = good;
  const uint16_t too_many = catalog::kMaxBucketAlgorithms + 1;
  std::memcpy(over.data() + section, &too_many, 2);
  over.resize(over.size() + too_many);
  EXPECT_TRUE(refused(over));
  // More distinct names than the bound.
  transport::Bytes names = good;
  names[section + 2] = catalog::kMaxDistinctBucketAlgorithms + 1;
  EXPECT_TRUE(refused(names));
  // A name the catalog lacks ("dense-rinG"), a zero-length name.
  transport::Bytes unknown = good;
  unknown[section + 13] = 'G';
  EXPECT_TRUE(refused(unknown));
  transport::Bytes zero = good;
  zero[section + 3] = 0;
  EXPECT_TRUE(refused(zero));
  // A name longer than what is left.
  transport::Bytes longname = good;
  longname[section + 3] = 60;
  EXPECT_TRUE(refused(longname));
  // An index past the table.
  transport::Bytes index = good;
  index[section + 15] = 2;
  EXPECT_TRUE(refused(index));
  // Truncated anywhere in the section, or trailing bytes.
  for (size_t cut = section; cut < good.size(); ++cut) {
    EXPECT_TRUE(refused(transport::Bytes(good.begin(), good.begin() + cut))) << cut;
  }
  transport::Bytes trailing = good;
  trailing.push_back(0);
  EXPECT_TRUE(refused(trailing));
  // A bucket's parameter is checked against the bucket's algorithm.
  member::SyncState s = State({"oktopk"});
  s.values.params["oktopk_tau"] = 8;
  EXPECT_TRUE(member::DecodeSyncMessage(member::EncodeSyncMessage(5, s), 5, 0, 2).ok());
  s.values.params["oktopk_tau"] = 0;
  EXPECT_TRUE(refused(member::EncodeSyncMessage(5, s)));
  s.values.bucket_algorithms.clear();
  s.values.params["oktopk_tau"] = 8;
  EXPECT_TRUE(refused(member::EncodeSyncMessage(5, s)));  // no algorithm in play has it
}

// Where the rules sit in the fixed part (epoch_sync.cc's layout): magic,
// epoch, next_step, newest_epoch, values_rank, plan_version, algorithm[64],
// density, teams, tau, step_deadline_ms.
constexpr size_t kRulesAt = 4 + 4 + 8 + 8 + 4 + 8 + 64 + 8 + 4 + 4 + 4;

TEST(BucketPlan, BarrierMessageCarriesTheRules) {
  member::SyncState s = State({"", "dense-ring"});
  s.values.rules.start_iter = 10;
  s.values.rules.min_compression_rate = 2.5;
  s.values.rules.dense_probe_period = 50;
  absl::StatusOr<member::SyncState> d =
      member::DecodeSyncMessage(member::EncodeSyncMessage(5, s), 5, 1, 4);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->values.rules.start_iter, 10u);
  EXPECT_EQ(d->values.rules.min_compression_rate, 2.5);
  EXPECT_EQ(d->values.rules.dense_probe_period, 50u);
  EXPECT_EQ(d->values.bucket_algorithms, s.values.bucket_algorithms);
  // The bounds themselves are accepted.
  s.values.rules.start_iter = member::kMaxRuleSteps;
  s.values.rules.min_compression_rate = member::kMaxMinCompressionRate;
  s.values.rules.dense_probe_period = member::kMaxRuleSteps;
  d = member::DecodeSyncMessage(member::EncodeSyncMessage(5, s), 5, 1, 4);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->values.rules == s.values.rules);
  // From() takes this rank's rules; out of bounds it sends the defaults, so
  // nothing a receiver would refuse goes out.
  member::Plan p;
  p.algorithm = "spardl";
  EXPECT_EQ(member::BarrierValues::From(p, s.values.rules).rules.start_iter, member::kMaxRuleSteps);
  member::BucketRules over;
  over.start_iter = 7;
  over.dense_probe_period = member::kMaxRuleSteps + 1;
  EXPECT_TRUE(member::BarrierValues::From(p, over).rules == member::BucketRules{});
}

TEST(BucketPlan, BarrierMessageRulesOutOfBoundsAreRefused) {
  const transport::Bytes good = member::EncodeSyncMessage(5, State({}));
  ASSERT_TRUE(member::DecodeSyncMessage(good, 5, 0, 2).ok());
  auto with = [&](size_t at, auto value) {
    transport::Bytes b = good;
    std::memcpy(b.data() + kRulesAt + at, &value, sizeof(value));
    absl::StatusOr<member::SyncState> d = member::DecodeSyncMessage(b, 5, 0, 2);
    return d.ok() ? std::string("accepted") : std::string(d.status().message());
  };
  // In range: accepted (the offsets are right).
  EXPECT_EQ(with(0, uint64_t{3}), "accepted");
  EXPECT_EQ(with(8, 1.5), "accepted");
  EXPECT_EQ(with(16, uint64_t{9}), "accepted");
  // Out of range: refused, naming the field.
  EXPECT_NE(with(0, member::kMaxRuleSteps + 1).find("start_iter"), std::string::npos);
  EXPECT_NE(with(0, ~uint64_t{0}).find("start_iter"), std::string::npos);
  EXPECT_NE(with(16, member::kMaxRuleSteps + 1).find("dense_probe_period"), std::string::npos);
  for (double rate :
       {-1.0, member::kMaxMinCompressionRate * 2, std::numeric_limits<double>::infinity(),
        std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_NE(with(8, rate).find("min_compression_rate"), std::string::npos) << rate;
  }
  // Truncated anywhere before the variable part.
  for (size_t cut = 0; cut < kRulesAt + 25; ++cut) {
    EXPECT_FALSE(
        member::DecodeSyncMessage(transport::Bytes(good.begin(), good.begin() + cut), 5, 0, 2).ok())
        << cut;
  }
}

TEST(BucketPlan, RulesBoundsOnOptions) {
  member::BucketRules r;
  EXPECT_TRUE(member::CheckBucketRules(r).ok());
  r.start_iter = member::kMaxRuleSteps + 1;
  EXPECT_EQ(member::CheckBucketRules(r).code(), absl::StatusCode::kInvalidArgument);
  r = {};
  r.min_compression_rate = -0.5;
  EXPECT_EQ(member::CheckBucketRules(r).code(), absl::StatusCode::kInvalidArgument);
  r = {};
  r.dense_probe_period = member::kMaxRuleSteps + 1;
  EXPECT_EQ(member::CheckBucketRules(r).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gradex
