// The node as the failure unit, on a fake clock: a member of a collective
// job that fails (lease, bad frames) takes the other members on its host
// out in the same new epoch; a clean Leave, a one-node job and a
// parameter-server job take out only the member itself; a member of the
// node that joins again comes in at the next barrier, as any new member.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "services/coordinator/membership/membership.h"
#include "tests/coordinator/test_job.h"

namespace gradex::coordinator {
namespace {

using C = membership::MemberRecord::Cause;
const absl::Time t0 = absl::FromUnixSeconds(1000);

// Members 1..n on `hosts` (agent "<host><local rank>"), joined at t0; epoch 1
// formed and entered by all. Ranks follow host then local rank, so member i
// has rank i-1 when the hosts are sorted.
void Start(membership::Membership& m, const std::vector<std::string>& hosts) {
  std::map<std::string, int> local;
  uint64_t rep = 0;
  for (size_t i = 0; i < hosts.size(); ++i) {
    const int l = local[hosts[i]]++;
    gradex::v1::JoinRequest r =
        TestJoin(hosts[i] + std::to_string(l), l, "addr-" + std::to_string(i));
    r.set_host(hosts[i]);
    ASSERT_TRUE(m.Join(r, i + 1, t0, &rep).ok());
  }
  std::vector<uint64_t> ev;
  ASSERT_TRUE(m.Tick(t0, &ev));
  ASSERT_EQ(m.latest().number, 1u);
  for (uint64_t id = 1; id <= hosts.size(); ++id) Beat(m, id, 1, t0);
}

// Every member but `dead` heartbeats each second until its lease (3 s)
// lapses; returns the evictions of the Tick that saw it.
std::vector<uint64_t> LoseLease(membership::Membership& m, uint64_t dead, size_t members) {
  std::vector<uint64_t> ev;
  for (int s = 1; s <= 3; ++s) {
    const absl::Time t = t0 + absl::Seconds(s);
    for (uint64_t id = 1; id <= members; ++id) {
      if (id != dead && m.Find(id) != nullptr) Beat(m, id, m.latest().number, t);
    }
    m.Tick(t, &ev);
  }
  return ev;
}

std::vector<C> Causes(const membership::Membership& m) {
  std::vector<C> out;
  for (const membership::MemberRecord& r : m.last_evicted()) out.push_back(r.cause);
  return out;
}

JobSettings Job(int world) {
  JobSettings s = FaultsTestJob(world);
  s.min_world_size = 1;
  return s;
}

TEST(NodeFailure, ALostLeaseTakesItsNodeOutAndTheOtherNodeStays) {
  membership::Membership m(Job(4));
  Start(m, {"a", "a", "b", "b"});  // members 1, 2 on a; 3, 4 on b
  EXPECT_EQ(m.latest().nodes, 2);
  const std::vector<uint64_t> ev = LoseLease(m, 4, 4);
  EXPECT_EQ(ev, (std::vector<uint64_t>{4, 3}));
  EXPECT_EQ(Causes(m), (std::vector<C>{C::kLease, C::kNode}));
  ASSERT_EQ(m.last_evicted().size(), 2u);
  EXPECT_EQ(m.last_evicted()[1].eviction,
            "node 'b' is out: its member 4 (agent 'b1') failed (its lease expired), and a node "
            "fails as a whole");
  ASSERT_EQ(m.latest().number, 2u);
  EXPECT_EQ(m.latest().roster, (std::vector<uint64_t>{1, 2}));
  EXPECT_TRUE(m.latest().immediate);
  EXPECT_EQ(m.latest().nodes, 1);
  EXPECT_EQ(m.Find(3), nullptr);
  EXPECT_NE(m.Find(1), nullptr);
}

TEST(NodeFailure, ACleanLeaveTakesOutOnlyTheLeaver) {
  membership::Membership m(Job(4));
  Start(m, {"a", "a", "b", "b"});
  ASSERT_TRUE(m.Leave(4).ok());
  std::vector<uint64_t> ev;
  ASSERT_TRUE(m.Tick(t0 + absl::Milliseconds(100), &ev));
  EXPECT_TRUE(ev.empty());
  EXPECT_EQ(m.latest().roster, (std::vector<uint64_t>{1, 2, 3}));
}

TEST(NodeFailure, ABadFrameSenderTakesItsNodeOut) {
  membership::Membership m(Job(4));
  Start(m, {"a", "a", "b", "b"});
  // Rank 0 (member 1) refused a frame from rank 1 (member 2, node a).
  ASSERT_TRUE(m.BlameBadFrames(1, m.latest(), 1, "bad frame"));
  std::vector<uint64_t> ev;
  ASSERT_TRUE(m.Tick(t0 + absl::Milliseconds(100), &ev));
  EXPECT_EQ(ev, (std::vector<uint64_t>{2, 1}));
  EXPECT_EQ(Causes(m), (std::vector<C>{C::kBadFrames, C::kNode}));
  EXPECT_EQ(m.latest().roster, (std::vector<uint64_t>{3, 4}));
}

TEST(NodeFailure, UnevenNodesFailAsAWholeToo) {
  membership::Membership m(Job(4));
  Start(m, {"a", "a", "a", "b"});
  LoseLease(m, 2, 4);
  EXPECT_EQ(Causes(m), (std::vector<C>{C::kLease, C::kNode, C::kNode}));
  EXPECT_EQ(m.latest().roster, (std::vector<uint64_t>{4}));
}

TEST(NodeFailure, InAOneNodeJobTheSurvivorsGoOn) {
  membership::Membership m(Job(4));
  Start(m, {"h", "h", "h", "h"});
  EXPECT_EQ(m.latest().nodes, 1);
  EXPECT_EQ(LoseLease(m, 4, 4), (std::vector<uint64_t>{4}));
  EXPECT_EQ(m.latest().roster, (std::vector<uint64_t>{1, 2, 3}));
}

TEST(NodeFailure, NotInAParameterServerJob) {
  JobSettings s = Job(4);
  s.algorithm = "dgs";
  s.ps.enabled = true;
  membership::Membership m(s);
  Start(m, {"a", "a", "b", "b"});
  EXPECT_EQ(LoseLease(m, 4, 4), (std::vector<uint64_t>{4}));
  EXPECT_EQ(m.latest().roster, (std::vector<uint64_t>{1, 2, 3}));
}

TEST(NodeFailure, ANodeMemberThatJoinsAgainComesInAtTheNextBarrier) {
  JobSettings s = Job(4);
  s.loss_settle = absl::Seconds(1);
  membership::Membership m(s);
  Start(m, {"a", "a", "b", "b"});
  EXPECT_EQ(LoseLease(m, 4, 4), (std::vector<uint64_t>{4, 3}));
  EXPECT_EQ(m.latest().number, 1u);  // the settle window holds the new epoch
  // Member 3's agent (alive, told NOT_FOUND) joins again inside the window.
  uint64_t rep = 0;
  gradex::v1::JoinRequest r = TestJoin("b0", 0, "addr-again");
  r.set_host("b");
  ASSERT_TRUE(m.Join(r, 5, t0 + absl::Milliseconds(3100), &rep).ok());
  std::vector<uint64_t> ev;
  const absl::Time t = t0 + absl::Seconds(4);
  for (uint64_t id : {1, 2}) Beat(m, id, 1, t);
  Beat(m, 5, 0, t);
  ASSERT_TRUE(m.Tick(t, &ev));
  EXPECT_EQ(m.latest().number, 2u);
  EXPECT_EQ(m.latest().roster, (std::vector<uint64_t>{1, 2}));  // without node b
  ASSERT_TRUE(m.Tick(t + absl::Milliseconds(50), &ev));
  EXPECT_EQ(m.latest().number, 3u);
  EXPECT_EQ(m.latest().roster, (std::vector<uint64_t>{1, 2, 5}));
  EXPECT_FALSE(m.latest().immediate);
  EXPECT_EQ(m.latest().effective_step, 16u);  // the first barrier 16 steps ahead
}

}  // namespace
}  // namespace gradex::coordinator
