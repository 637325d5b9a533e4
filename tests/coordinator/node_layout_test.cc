// The node layout from join to plan: members join with their node (host),
// the published plan lists each member's node and the layout the
// coordinator computed (catalog::LayoutOf), the agent's decoding of the plan
// (ToPlan) carries the nodes, and the coordinator's gauges show the layout.
// An uneven layout is published (the exchange runs flat on it), not refused.
// A member that dies takes its node out of the next plan; one that leaves
// takes out only itself.
#include "catalog/node_layout.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "member/grpc_messages.h"
#include "prometheus/registry.h"
#include "services/coordinator/coordinator.h"
#include "services/coordinator/metrics.h"
#include "version/version.h"

namespace gradex::coordinator {
namespace {

const absl::Time t0 = absl::FromUnixSeconds(5000);

// The value of the coordinator's unlabelled metric `name` (-1: absent).
double Value(prometheus::Registry& r, const std::string& name) {
  for (const prometheus::MetricFamily& f : r.Collect()) {
    if (f.name != name || f.metric.size() != 1) continue;
    const prometheus::ClientMetric& m = f.metric[0];
    return f.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
  }
  return -1;
}

class NodeLayoutTest : public ::testing::Test {
 protected:
  // Members on `hosts` (agent "<host><local rank>", local ranks counted per
  // host) join a collective job of that many members at t0; the first
  // epoch forms.
  void Start(const std::vector<std::string>& hosts) {
    JobSettings s;
    s.job_id = "job";
    s.world_size = static_cast<int>(hosts.size());
    s.min_world_size = s.world_size;
    s.algorithm = "spardl-bsag";
    s.lease = absl::Seconds(3);
    c_ = std::make_unique<Coordinator>(s, &metrics_);
    std::map<std::string, int> local;
    for (const std::string& h : hosts) {
      gradex::v1::JoinRequest r;
      r.set_job_id("job");
      const int l = local[h]++;
      r.set_agent_id(h + std::to_string(l));
      r.set_host(h);
      r.set_local_rank(l);
      r.set_ucx_address("127.0.0.1:1");
      r.set_wire_protocol(gradex::version::kWireProtocol);
      auto resp = c_->Join(r, t0);
      ASSERT_TRUE(resp.ok()) << resp.status();
      ids_.push_back(resp->member_id());
    }
    c_->Tick(t0);
    ASSERT_NE(c_->plan(), nullptr);
    ASSERT_EQ(c_->plan()->epoch(), 1u);
  }
  // The plan's members' hosts, in rank order.
  std::vector<std::string> Hosts() const {
    std::vector<std::string> out;
    for (const gradex::v1::Member& m : c_->plan()->members()) out.push_back(m.host());
    return out;
  }
  void Beat(uint64_t id, absl::Time t) {
    gradex::v1::HeartbeatRequest h;
    h.set_member_id(id);
    h.set_epoch(c_->plan()->epoch());
    ASSERT_TRUE(c_->Heartbeat(h, t).ok()) << id;
  }

  prometheus::Registry registry_;
  CoordinatorMetrics metrics_{registry_};
  std::unique_ptr<Coordinator> c_;
  std::vector<uint64_t> ids_;  // in join order
};

TEST_F(NodeLayoutTest, TwoNodesOfTwoFromJoinToPlan) {
  Start({"a", "a", "b", "b"});
  auto p = c_->plan();
  EXPECT_EQ(Hosts(), (std::vector<std::string>{"a", "a", "b", "b"}));
  EXPECT_EQ(p->layout().nodes(), 2u);
  EXPECT_EQ(p->layout().ranks_per_node(), 2u);
  EXPECT_EQ(p->layout().flat_reason(), "");
  // The agents' view of the same plan: each member's node, and the layout
  // they compute from it is the coordinator's.
  absl::StatusOr<member::Plan> decoded = member::ToPlan(*p, 0);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  std::vector<std::string> nodes;
  for (const member::PlanMember& m : decoded->members) nodes.push_back(m.node);
  EXPECT_EQ(nodes, (std::vector<std::string>{"a", "a", "b", "b"}));
  const catalog::NodeLayout layout = catalog::LayoutOf(nodes);
  EXPECT_EQ(layout.node_ranks, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_TRUE(catalog::Hierarchical(layout));
  EXPECT_EQ(Value(registry_, "gradex_coordinator_nodes"), 2);
  EXPECT_EQ(Value(registry_, "gradex_coordinator_ranks_per_node"), 2);
  // A node over the join's bound (255 bytes) makes the plan refused.
  gradex::v1::Plan bad = *p;
  bad.mutable_members(1)->set_host(std::string(256, 'n'));
  EXPECT_EQ(member::ToPlan(bad, 0).status().code(), absl::StatusCode::kInvalidArgument);
  bad.mutable_members(1)->set_host(std::string(255, 'n'));
  EXPECT_TRUE(member::ToPlan(bad, 0).ok());
}

TEST_F(NodeLayoutTest, AnUnevenLayoutIsPublishedWithItsFlatReason) {
  Start({"a", "a", "b", "a"});
  auto p = c_->plan();
  EXPECT_EQ(Hosts(), (std::vector<std::string>{"a", "a", "a", "b"}));
  EXPECT_EQ(p->layout().nodes(), 2u);
  EXPECT_EQ(p->layout().ranks_per_node(), 0u);
  EXPECT_EQ(p->layout().flat_reason(), "uneven nodes (2 nodes of 3, 1 ranks)");
  absl::StatusOr<member::Plan> decoded = member::ToPlan(*p, 0);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->members[3].node, "b");
  EXPECT_EQ(Value(registry_, "gradex_coordinator_nodes"), 2);
  EXPECT_EQ(Value(registry_, "gradex_coordinator_ranks_per_node"), 0);
}

TEST_F(NodeLayoutTest, ADeadMemberTakesItsNodeOutOfTheNextPlan) {
  Start({"a", "a", "b", "b"});
  // ids_[3] ("b1", rank 3) stops; the others heartbeat until its lease lapses.
  for (int s = 1; s <= 3; ++s) {
    const absl::Time t = t0 + absl::Seconds(s);
    for (int i = 0; i < 3; ++i) Beat(ids_[i], t);
    c_->Tick(t);
  }
  auto p = c_->plan();
  EXPECT_EQ(p->epoch(), 2u);
  EXPECT_EQ(Hosts(), (std::vector<std::string>{"a", "a"}));
  EXPECT_EQ(p->members(0).member_id(), ids_[0]);
  EXPECT_EQ(p->members(1).member_id(), ids_[1]);
  EXPECT_EQ(p->layout().nodes(), 1u);
  EXPECT_EQ(p->layout().ranks_per_node(), 2u);
  EXPECT_EQ(p->layout().flat_reason(), "one node");
  EXPECT_FALSE(c_->IsMember(ids_[2]));
  EXPECT_EQ(Value(registry_, "gradex_coordinator_evictions_total"), 2);
  EXPECT_EQ(Value(registry_, "gradex_coordinator_node_evictions_total"), 1);
  EXPECT_EQ(Value(registry_, "gradex_coordinator_nodes"), 1);
  EXPECT_EQ(Value(registry_, "gradex_coordinator_ranks_per_node"), 2);
}

TEST_F(NodeLayoutTest, ALeaveTakesOutOnlyTheLeaver) {
  Start({"a", "a", "b", "b"});
  gradex::v1::LeaveRequest leave;
  leave.set_member_id(ids_[3]);
  ASSERT_TRUE(c_->Leave(leave, t0 + absl::Seconds(1)).ok());
  auto p = c_->plan();
  EXPECT_EQ(p->epoch(), 2u);
  EXPECT_EQ(Hosts(), (std::vector<std::string>{"a", "a", "b"}));
  EXPECT_EQ(p->layout().ranks_per_node(), 0u);  // uneven: runs flat, not refused
  EXPECT_EQ(Value(registry_, "gradex_coordinator_evictions_total"), 0);
  EXPECT_EQ(Value(registry_, "gradex_coordinator_ranks_per_node"), 0);
}

}  // namespace
}  // namespace gradex::coordinator
