// The coordinator's membership view (services/coordinator/membership/membership_view.h):
// gradex_coordinator_member_info has exactly one series per worker and per
// shard a server holds, with the shard's parameter range; a member that
// leaves is removed at once; a new epoch replaces the view; the series are
// capped. ShardRanges cuts the model as the servers do (DgsLayout::SplitShards).
#include "services/coordinator/membership/membership_view.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "prometheus/registry.h"
#include "ps/dgs_layout.h"
#include "services/coordinator/coordinator.h"
#include "version/version.h"

namespace gradex::coordinator {
namespace {

const absl::Time t0 = absl::FromUnixSeconds(5000);

gradex::v1::JoinRequest Req(const std::string& job, const std::string& agent,
                            const std::string& host, bool server) {
  gradex::v1::JoinRequest r;
  r.set_job_id(job);
  r.set_agent_id(agent);
  r.set_host(host);
  r.set_ucx_address("127.0.0.1:1");
  r.set_wire_protocol(gradex::version::kWireProtocol);
  r.set_role(server ? gradex::v1::ROLE_SERVER : gradex::v1::ROLE_WORKER);
  return r;
}

// Every series of gradex_coordinator_member_info as "name=value,..." (labels
// sorted by name), each with its value.
std::map<std::string, double> Info(prometheus::Registry& r) {
  std::map<std::string, double> out;
  for (const prometheus::MetricFamily& f : r.Collect()) {
    if (f.name != "gradex_coordinator_member_info") continue;
    for (const prometheus::ClientMetric& m : f.metric) {
      std::map<std::string, std::string> labels;
      for (const auto& l : m.label) labels[l.name] = l.value;
      std::string key;
      for (const auto& [k, v] : labels) absl::StrAppend(&key, key.empty() ? "" : ",", k, "=", v);
      out[key] = m.gauge.value;
    }
  }
  return out;
}

std::string Worker(int rank, const std::string& host, int slot) {
  return absl::StrCat("host=", host, ",rank=", rank, ",role=worker,slot=", slot);
}
std::string Server(int rank, const std::string& host, int shard, uint64_t first, uint64_t last) {
  return absl::StrCat("first=", first, ",host=", host, ",last=", last, ",rank=", rank,
                      ",role=server,shard=", shard);
}

TEST(ShardRangesTest, TheSameCutAsTheServers) {
  EXPECT_TRUE(controllers::ShardRanges(10, 0).empty());
  for (uint32_t total : {1u, 2u, 7u, 30u, 1000u, 1000003u}) {
    auto layout = ps::DgsLayout::Create({total});
    ASSERT_TRUE(layout.ok());
    for (uint32_t shards : {1u, 2u, 3u, 7u, 64u}) {
      if (shards > total) continue;
      auto want = layout->SplitShards(shards);
      ASSERT_TRUE(want.ok());
      std::vector<controllers::ShardRange> got = controllers::ShardRanges(total, shards);
      ASSERT_EQ(got.size(), want->size());
      for (size_t s = 0; s < got.size(); ++s) {
        EXPECT_EQ(got[s].first, (*want)[s].begin) << total << "/" << shards << " shard " << s;
        EXPECT_EQ(got[s].last, (*want)[s].end) << total << "/" << shards << " shard " << s;
      }
    }
  }
}

class PsViewTest : public ::testing::Test {
 protected:
  void Start(const std::string& ps) {
    auto s = ParseJobConfig(
        R"({"job_id":"j","world_size":3,"algorithm":"dgs","density":0.01,"lease_ms":60000,"entry_timeout_ms":120000,)"
        R"("ps":)" +
        ps + "}");
    ASSERT_TRUE(s.ok()) << s.status();
    JobSettings js = *s;
    js.loss_settle = absl::Seconds(1);
    c_ = std::make_unique<Coordinator>(js, &metrics_);
  }
  uint64_t Join(const std::string& agent, const std::string& host, bool server, absl::Time t) {
    auto r = c_->Join(Req("j", agent, host, server), t);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->member_id() : 0;
  }
  // The view the plan implies: a row per worker (its slot), one per shard.
  std::map<std::string, double> FromPlan(const std::vector<std::pair<uint64_t, uint64_t>>& ranges) {
    auto p = c_->plan();
    std::map<std::string, double> want;
    for (const auto& m : p->members()) {
      const std::string host = hosts_[m.agent_id()];
      if (m.role() == gradex::v1::ROLE_WORKER) {
        want[Worker(m.rank(), host, p->ps().worker_slot(m.rank()))] = 1;
      }
    }
    for (const auto& a : p->ps().assignments()) {
      const auto& m = p->members(a.rank());
      want[Server(a.rank(), hosts_[m.agent_id()], a.shard(), ranges[a.shard()].first,
                  ranges[a.shard()].second)] = 1;
    }
    return want;
  }

  prometheus::Registry registry_;
  CoordinatorMetrics metrics_{registry_};
  std::unique_ptr<Coordinator> c_;
  std::map<std::string, std::string> hosts_ = {
      {"w0", "h1"}, {"w1", "h1"}, {"srv", "h1"}, {"w2", "h2"}};
};

TEST_F(PsViewTest, OneSeriesPerWorkerAndPerShardWithItsRange) {
  Start(R"({"layer_sizes":[10,21]})");  // 31 elements, one shard per host: h1, h2
  EXPECT_TRUE(Info(registry_).empty());
  std::map<std::string, uint64_t> id;
  for (const char* a : {"w0", "w1", "srv", "w2"})
    id[a] = Join(a, hosts_[a], a == std::string("srv"), t0);
  c_->Tick(t0);
  ASSERT_NE(c_->plan(), nullptr);
  ASSERT_EQ(c_->plan()->ps().shards(), 2u);
  const auto full = FromPlan({{0, 16}, {16, 31}});
  ASSERT_EQ(full.size(), 5u);  // 3 workers + 2 shards of the one server
  EXPECT_EQ(Info(registry_), full);
  EXPECT_EQ(metrics_.members_unlisted.Value(), 0);

  // w2 leaves: its row goes at once, before the loss settles into an epoch.
  gradex::v1::LeaveRequest leave;
  leave.set_member_id(id["w2"]);
  ASSERT_TRUE(c_->Leave(leave, t0).ok());
  c_->Tick(t0 + absl::Milliseconds(10));
  auto want = full;
  int w2_rank = -1;
  for (const auto& m : c_->plan()->members()) {
    if (m.agent_id() == "w2") w2_rank = m.rank();
  }
  ASSERT_GE(w2_rank, 0);
  EXPECT_EQ(want.erase(Worker(w2_rank, "h2", c_->plan()->ps().worker_slot(w2_rank))), 1u);
  EXPECT_EQ(c_->plan()->members_size(), 4);  // still the old epoch
  EXPECT_EQ(Info(registry_), want);

  // The survivors' epoch: the view is rebuilt from its plan (shards fixed at 2).
  c_->Tick(t0 + absl::Seconds(2));
  ASSERT_EQ(c_->plan()->members_size(), 3);
  const auto after = FromPlan({{0, 16}, {16, 31}});
  EXPECT_EQ(after.size(), 4u);
  EXPECT_EQ(Info(registry_), after);

  // The server leaves: its shard rows go; the next epoch has none.
  leave.set_member_id(id["srv"]);
  ASSERT_TRUE(c_->Leave(leave, t0 + absl::Seconds(3)).ok());
  c_->Tick(t0 + absl::Seconds(5));
  ASSERT_EQ(c_->plan()->members_size(), 2);
  EXPECT_FALSE(c_->plan()->has_ps());
  // No assignment: workers without a slot label.
  std::map<std::string, double> no_slot;
  for (const auto& m : c_->plan()->members()) {
    no_slot[absl::StrCat("host=h1,rank=", m.rank(), ",role=worker")] = 1;
  }
  EXPECT_EQ(Info(registry_), no_slot);

  // Everyone leaves: the view is empty.
  for (const char* a : {"w0", "w1"}) {
    leave.set_member_id(id[a]);
    ASSERT_TRUE(c_->Leave(leave, t0 + absl::Seconds(6)).ok());
  }
  c_->Tick(t0 + absl::Seconds(8));
  EXPECT_TRUE(Info(registry_).empty());
}

TEST_F(PsViewTest, AServerHoldsSeveralShardsAndAStandbyNone) {
  Start(R"({"layer_sizes":[5,5],"servers":2,"server_shards":3})");  // 10 elements: 4, 3, 3
  hosts_["srv2"] = "h3";
  for (const char* a : {"w0", "w1", "w2"}) Join(a, hosts_[a], false, t0);
  Join("srv", "h1", true, t0);
  Join("srv2", "h3", true, t0);
  c_->Tick(t0);
  ASSERT_NE(c_->plan(), nullptr);
  ASSERT_EQ(c_->plan()->ps().shards(), 3u);
  const auto want = FromPlan({{0, 4}, {4, 7}, {7, 10}});
  EXPECT_EQ(want.size(), 6u);  // 3 workers, shards 0 and 2 on one server, 1 on the other
  EXPECT_EQ(Info(registry_), want);
}

TEST(MembershipViewTest, CollectiveJobsAreListedAndTheSeriesCapped) {
  const int n = static_cast<int>(membership::kMaxMemberInfoSeries) + 8;
  auto s = ParseJobConfig(absl::StrCat(R"({"job_id":"c","world_size":)", n,
                                       R"(,"algorithm":"spardl","density":0.01})"));
  ASSERT_TRUE(s.ok()) << s.status();
  prometheus::Registry registry;
  CoordinatorMetrics metrics(registry);
  Coordinator c(*s, &metrics);
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(c.Join(Req("c", absl::StrCat("a", i), absl::StrCat("host-", i), false), t0).ok());
  }
  c.Tick(t0);
  ASSERT_NE(c.plan(), nullptr);
  ASSERT_EQ(c.plan()->members_size(), n);
  const auto info = Info(registry);
  ASSERT_EQ(info.size(), membership::kMaxMemberInfoSeries);
  EXPECT_EQ(metrics.members_unlisted.Value(), 8);
  // The first kMaxMemberInfoSeries ranks, each with its own host, no slot.
  std::set<std::string> want;
  for (const auto& m : c.plan()->members()) {
    if (m.rank() >= static_cast<int>(membership::kMaxMemberInfoSeries)) continue;
    want.insert(absl::StrCat("host=", m.host(), ",rank=", m.rank(), ",role=worker"));
  }
  std::set<std::string> got;
  for (const auto& [k, v] : info) {
    got.insert(k);
    EXPECT_EQ(v, 1) << k;
  }
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace gradex::coordinator
