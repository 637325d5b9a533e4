// Membership and epochs on a fake clock: rendezvous to world size (or the
// minimum after the timeout), eviction on lease expiry with dense ranks, late
// joiners admitted at the next plan barrier, rebuild after a restart.
#include "services/coordinator/membership/membership.h"

#include <gtest/gtest.h>

#include "services/coordinator/coordinator.h"
#include "tests/coordinator/test_job.h"

namespace gradex::coordinator {
namespace {

JobSettings Job(int world, int min_world = 0) {
  JobSettings s = TestJob(world, absl::Seconds(5));
  s.min_world_size = min_world == 0 ? world : min_world;
  s.rendezvous_timeout = absl::Seconds(30);
  s.barrier_period = 64;
  s.plan_lead_steps = 64;
  return s;
}

gradex::v1::JoinRequest Req(const std::string& agent, int local_rank = 0) {
  return TestJoin(agent, local_rank, "addr-" + agent);
}

const absl::Time t0 = absl::FromUnixSeconds(1000);

TEST(Membership, FirstEpochWhenWorldSizeJoined) {
  membership::Membership m(Job(3));
  std::vector<uint64_t> ev;
  uint64_t rep = 0;
  ASSERT_TRUE(m.Join(Req("a", 0), 11, t0, &rep).ok());
  ASSERT_TRUE(m.Join(Req("b", 1), 12, t0, &rep).ok());
  EXPECT_FALSE(m.Tick(t0, &ev));
  EXPECT_FALSE(m.has_epoch());
  ASSERT_TRUE(m.Join(Req("c", 2), 13, t0, &rep).ok());
  EXPECT_TRUE(m.Tick(t0, &ev));
  ASSERT_TRUE(m.has_epoch());
  EXPECT_EQ(m.latest().number, 1u);
  EXPECT_EQ(m.latest().roster, (std::vector<uint64_t>{11, 12, 13}));  // by local rank
  EXPECT_EQ(m.latest().effective_step, 0u);
}

// The join tells the member the job config's plan-decided values at once
// (the client compares what it asked for with them before its first step).
TEST(Membership, JoinResponseCarriesThePlanConfig) {
  JobSettings s = Job(2);
  s.density = 0.002;
  s.teams = 2;
  s.auto_teams = true;
  s.params["kprime"] = 7;
  Coordinator c(s, nullptr);
  absl::StatusOr<gradex::v1::JoinResponse> r = c.Join(Req("a"), t0);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->has_plan_config());
  EXPECT_EQ(r->plan_config().algorithm(), "spardl-bsag");
  EXPECT_EQ(r->plan_config().density(), 0.002);
  EXPECT_EQ(r->plan_config().teams(), 2);
  EXPECT_TRUE(r->plan_config().auto_teams());
  EXPECT_EQ(r->plan_config().params().at("kprime"), 7);
  s.auto_algorithm = true;  // a job config's "auto": kept, not the default it runs first
  Coordinator a(s, nullptr);
  r = a.Join(Req("b"), t0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->plan_config().algorithm(), kAutoAlgorithm);
}

TEST(Membership, WrongJobAndMinimumAfterTimeout) {
  membership::Membership m(Job(4, 2));
  uint64_t rep = 0;
  gradex::v1::JoinRequest other = Req("x");
  other.set_job_id("other");
  EXPECT_EQ(m.Join(other, 9, t0, &rep).code(), absl::StatusCode::kFailedPrecondition);
  std::vector<uint64_t> ev;
  ASSERT_TRUE(m.Join(Req("a"), 1, t0, &rep).ok());
  ASSERT_TRUE(m.Join(Req("b"), 2, t0 + absl::Seconds(1), &rep).ok());
  // Keep leases alive while the rendezvous waits.
  for (int s = 2; s < 30; s += 2) {
    ASSERT_TRUE(m.Heartbeat(1, 0, t0 + absl::Seconds(s)).ok());
    ASSERT_TRUE(m.Heartbeat(2, 0, t0 + absl::Seconds(s)).ok());
    EXPECT_FALSE(m.Tick(t0 + absl::Seconds(s), &ev));
  }
  ASSERT_TRUE(m.Heartbeat(1, 0, t0 + absl::Seconds(30)).ok());
  ASSERT_TRUE(m.Heartbeat(2, 0, t0 + absl::Seconds(30)).ok());
  EXPECT_TRUE(m.Tick(t0 + absl::Seconds(30), &ev));
  EXPECT_EQ(m.latest().roster.size(), 2u);
  EXPECT_TRUE(ev.empty());
}

TEST(Membership, EvictionOnLeaseExpiryGivesNewEpochWithDenseRanks) {
  membership::Membership m(Job(4));
  uint64_t rep = 0;
  std::vector<uint64_t> ev;
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(m.Join(Req("a" + std::to_string(i), i), 100 + i, t0, &rep).ok());
  ASSERT_TRUE(m.Tick(t0, &ev));
  // Everyone but member 101 (rank 1) heartbeats; they ran to step 40.
  absl::Time t = t0;
  for (int k = 1; k <= 6; ++k) {
    t = t0 + absl::Seconds(k);
    for (uint64_t id : {100, 102, 103}) ASSERT_TRUE(m.Heartbeat(id, 40, t).ok());
    m.Tick(t, &ev);
  }
  ASSERT_EQ(ev, (std::vector<uint64_t>{101}));
  EXPECT_EQ(m.Heartbeat(101, 0, t).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(m.latest().number, 2u);
  EXPECT_TRUE(m.latest().immediate);
  EXPECT_EQ(m.latest().roster, (std::vector<uint64_t>{100, 102, 103}));
  EXPECT_EQ(m.RankIn(m.latest(), 103), 2);    // dense: 0..P-2
  EXPECT_EQ(m.latest().effective_step, 40u);  // where the survivors are
}

TEST(Membership, LateJoinerAdmittedAtNextBarrier) {
  JobSettings s = Job(2);
  s.max_world_size = 3;  // elastic growth by one
  membership::Membership m(s);
  uint64_t rep = 0;
  std::vector<uint64_t> ev;
  ASSERT_TRUE(m.Join(Req("a", 0), 1, t0, &rep).ok());
  ASSERT_TRUE(m.Join(Req("b", 1), 2, t0, &rep).ok());
  ASSERT_TRUE(m.Tick(t0, &ev));
  m.NoteStep(1, 99, t0);  // rank 0 finished step 99
  ASSERT_TRUE(m.Join(Req("c", 2), 3, t0, &rep).ok());
  EXPECT_EQ(m.pending(), 1u);
  ASSERT_TRUE(m.Tick(t0, &ev));
  EXPECT_EQ(m.latest().number, 2u);
  EXPECT_FALSE(m.latest().immediate);
  // First barrier (multiple of 64) at least the lead (64) past step 100.
  EXPECT_EQ(m.latest().effective_step, 192u);
  EXPECT_EQ(m.latest().roster, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(m.pending(), 0u);
  EXPECT_FALSE(m.Tick(t0, &ev));  // nothing more to do
}

TEST(Membership, RestartRebuildKeepsEpochMonotonicAndRanks) {
  // A fresh Membership stands for the restarted coordinator; agents report
  // epoch 7, P=3, ranks 2,0,1 and the steps they are at.
  membership::Membership m(Job(3));
  uint64_t rep = 0;
  std::vector<uint64_t> ev;
  auto rejoin = [&](const std::string& agent, int rank, uint64_t id, uint64_t step) {
    gradex::v1::JoinRequest r = Req(agent, 0);
    r.set_last_epoch(7);
    r.set_last_rank(rank);
    r.set_last_world_size(3);
    r.set_next_step(step);
    ASSERT_TRUE(m.Join(r, id, t0, &rep).ok());
  };
  rejoin("z", 2, 50, 300);
  rejoin("x", 0, 51, 301);
  EXPECT_FALSE(m.Tick(t0, &ev));
  rejoin("y", 1, 52, 301);
  ASSERT_TRUE(m.Tick(t0, &ev));
  EXPECT_EQ(m.latest().number, 8u);                                   // > every reported epoch
  EXPECT_EQ(m.latest().roster, (std::vector<uint64_t>{51, 52, 50}));  // old ranks kept
  EXPECT_FALSE(m.latest().immediate);  // all came back: switch at a barrier
  EXPECT_EQ(m.latest().effective_step, 384u);
}

TEST(Membership, RestartRebuildWithAMemberMissingStartsAtOnce) {
  JobSettings s = Job(3, 1);
  membership::Membership m(s);
  uint64_t rep = 0;
  std::vector<uint64_t> ev;
  gradex::v1::JoinRequest r = Req("x");
  r.set_last_epoch(12);
  r.set_last_rank(1);
  r.set_last_world_size(2);
  r.set_next_step(77);
  ASSERT_TRUE(m.Join(r, 5, t0, &rep).ok());
  EXPECT_FALSE(m.Tick(t0 + absl::Seconds(4), &ev));
  ASSERT_TRUE(m.Heartbeat(5, 77, t0 + absl::Seconds(29)).ok());
  ASSERT_TRUE(m.Tick(t0 + absl::Seconds(31), &ev));
  EXPECT_EQ(m.latest().number, 13u);
  EXPECT_TRUE(m.latest().immediate);
  EXPECT_EQ(m.latest().effective_step, 77u);
}

TEST(Membership, ReRegistrationReplacesTheOldMember) {
  membership::Membership m(Job(2));
  uint64_t rep = 0;
  std::vector<uint64_t> ev;
  ASSERT_TRUE(m.Join(Req("a", 0), 1, t0, &rep).ok());
  ASSERT_TRUE(m.Join(Req("b", 1), 2, t0, &rep).ok());
  m.SetSecret(2, "secret-of-b");
  ASSERT_TRUE(m.Tick(t0, &ev));
  gradex::v1::JoinRequest again = Req("b", 1);
  again.set_member_secret("secret-of-b");  // the live membership's own
  ASSERT_TRUE(m.Join(again, 3, t0, &rep).ok());
  EXPECT_EQ(rep, 2u);
  EXPECT_EQ(m.Find(2), nullptr);
  ASSERT_TRUE(m.Tick(t0, &ev));
  EXPECT_TRUE(m.latest().immediate);  // the old "b" is gone from the running epoch
  EXPECT_EQ(m.latest().roster, (std::vector<uint64_t>{1, 3}));
}

// Agent ids are public (every plan lists them): taking a live member's id
// over needs its secret; without it the join is ALREADY_EXISTS naming the
// id, and the member and its epoch stay. Once its lease lapsed (a restarted
// process of the same agent) the id is free without the secret.
TEST(Membership, ALiveAgentIdIsRefusedWithoutItsMembersSecret) {
  membership::Membership m(Job(2));
  uint64_t rep = 0;
  std::vector<uint64_t> ev;
  ASSERT_TRUE(m.Join(Req("a", 0), 1, t0, &rep).ok());
  ASSERT_TRUE(m.Join(Req("b", 1), 2, t0, &rep).ok());
  m.SetSecret(1, "secret-of-a");
  m.SetSecret(2, "secret-of-b");
  ASSERT_TRUE(m.Tick(t0, &ev));
  for (const std::string secret : {"", "secret-of-a", "secret-of-b-but-longer", "x"}) {
    gradex::v1::JoinRequest takeover = Req("b", 1);
    takeover.set_member_secret(secret);
    absl::Status st = m.Join(takeover, 3, t0 + absl::Seconds(4), &rep);
    EXPECT_EQ(st.code(), absl::StatusCode::kAlreadyExists) << secret;
    EXPECT_NE(st.message().find("agent_id 'b' is held by live member 2"), std::string::npos)
        << st.message();
    EXPECT_EQ(rep, 0u);
  }
  ASSERT_NE(m.Find(2), nullptr);
  EXPECT_EQ(m.Find(3), nullptr);
  EXPECT_FALSE(m.Tick(t0 + absl::Seconds(4), &ev));  // no epoch change
  EXPECT_EQ(m.latest().number, 1u);
  // A heartbeat keeps the id held past the first lease.
  ASSERT_TRUE(m.Heartbeat(2, 0, t0 + absl::Seconds(4)).ok());
  ASSERT_TRUE(m.Heartbeat(1, 0, t0 + absl::Seconds(4)).ok());
  EXPECT_EQ(m.Join(Req("b", 1), 3, t0 + absl::Seconds(8), &rep).code(),
            absl::StatusCode::kAlreadyExists);
  // The lease lapsed (the old process is gone): a restarted one takes the id.
  ASSERT_TRUE(m.Join(Req("b", 1), 3, t0 + absl::Seconds(9), &rep).ok());
  EXPECT_EQ(rep, 2u);
}

struct CountingWatcher : PlanWatcher {
  int superseded = 0;
  void PlanChanged() override {}
  void MemberGone() override {}
  void Superseded() override { ++superseded; }
};

// One WatchPlan stream per member: a member's new stream ends its old one,
// and other members' streams stay.
TEST(Coordinator, ANewWatchOfAMemberSupersedesItsOldOne) {
  Coordinator c(Job(2), nullptr);
  auto a1 = std::make_shared<CountingWatcher>();
  auto a2 = std::make_shared<CountingWatcher>();
  auto b = std::make_shared<CountingWatcher>();
  c.Subscribe(7, a1);
  c.Subscribe(8, b);
  EXPECT_EQ(c.watchers(), 2u);
  c.Subscribe(7, a2);
  EXPECT_EQ(a1->superseded, 1);
  EXPECT_EQ(a2->superseded, 0);
  EXPECT_EQ(b->superseded, 0);
  EXPECT_EQ(c.watchers(), 2u);
  for (int i = 0; i < 1000; ++i) c.Subscribe(7, std::make_shared<CountingWatcher>());
  EXPECT_EQ(a2->superseded, 1);
  EXPECT_EQ(c.watchers(), 2u);
}

TEST(Coordinator, StallNamesTheRanksThatHaveNotArrived) {
  JobSettings s = Job(3);
  s.step_deadline = absl::Seconds(2);
  Coordinator c(s, nullptr);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 3; ++i) {
    auto r = c.Join(Req("a" + std::to_string(i), i), t0);
    ASSERT_TRUE(r.ok());
    ids.push_back(r->member_id());
  }
  c.Tick(t0);
  ASSERT_EQ(c.epoch(), 1u);
  auto report = [&](int rank, uint64_t step) {
    gradex::v1::StepReport r;
    r.set_member_id(ids[rank]);
    r.set_epoch(1);
    r.set_step(step);
    bool accepted = false;
    ASSERT_TRUE(c.Report(r, t0, &accepted).ok());
    EXPECT_TRUE(accepted);
  };
  for (uint64_t step = 0; step < 5; ++step) {
    for (int rank = 0; rank < 3; ++rank) report(rank, step);
  }
  report(0, 5);
  report(2, 5);  // rank 1 never finishes step 5
  c.Tick(t0 + absl::Seconds(1));
  EXPECT_EQ(c.stalled_steps(), 0u);
  for (int k = 0; k < 3; ++k) {
    gradex::v1::HeartbeatRequest h;
    for (uint64_t id : ids) {
      h.set_member_id(id);
      ASSERT_TRUE(c.Heartbeat(h, t0 + absl::Seconds(3)).ok());
    }
    c.Tick(t0 + absl::Seconds(3));
  }
  EXPECT_EQ(c.stalled_steps(), 1u);  // counted once per stalled step
}

}  // namespace
}  // namespace gradex::coordinator
