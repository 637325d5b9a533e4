// Members that fail without leaving, on a fake clock: the
// entry deadline evicts and names a member that heartbeats but never enters
// its epoch, or that a majority of its peers' entry waits end at. (Item 6,
// failures close together: loss_settle_test.cc.)
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "services/coordinator/job_config.h"
#include "services/coordinator/membership/membership.h"
#include "tests/coordinator/test_job.h"

namespace gradex::coordinator {
namespace {

const absl::Time t0 = absl::FromUnixSeconds(1000);

JobSettings Job(int world) { return FaultsTestJob(world); }

gradex::v1::JoinRequest Req(const std::string& agent, int local_rank) {
  return TestJoin(agent, local_rank, "addr-" + agent);
}

// Three members run epoch 1; member 9 joins and heartbeats, but never says
// it enters: epoch 2 (at the barrier) holds it. Its entry starts when the
// job reaches the barrier, not at the epoch's forming.
struct IdleFixture {
  JobSettings s = [] {
    JobSettings j = Job(3);
    j.max_world_size = 4;
    return j;
  }();
  membership::Membership m{s};
  std::vector<uint64_t> ev;
  absl::Time barrier_at;

  void SetUp(bool idle_enters) {
    StartTestEpoch(m, t0, 3);
    uint64_t rep = 0;
    ASSERT_TRUE(m.Join(Req("idle", 9), 9, t0, &rep).ok());
    ASSERT_TRUE(m.Tick(t0, &ev));
    ASSERT_EQ(m.latest().number, 2u);
    ASSERT_EQ(m.latest().roster.size(), 4u);
    const uint64_t barrier = m.latest().effective_step;
    ASSERT_GT(barrier, 0u);
    // Long before the barrier: nobody is held at entry yet, nobody goes.
    absl::Time t = t0;
    for (int k = 1; k <= 20; ++k) {
      t = t0 + absl::Seconds(k);
      for (uint64_t id : {1, 2, 3}) Beat(m, id, 1, t);
      Beat(m, 9, 0, t);
      EXPECT_FALSE(m.Tick(t, &ev));
    }
    EXPECT_TRUE(ev.empty());
    // The job reaches the barrier; the three start entering epoch 2.
    barrier_at = t + absl::Seconds(1);
    for (uint64_t id : {1, 2, 3}) m.NoteStep(id, barrier - 1, barrier_at);
    EXPECT_FALSE(m.Tick(barrier_at, &ev));
    for (uint64_t id : {1, 2, 3}) Beat(m, id, 2, barrier_at);
    Beat(m, 9, idle_enters ? 2 : 0, barrier_at);
  }
};

TEST(EntryDeadline, AMemberThatNeverEntersIsEvictedAndNamedAtTheDeadline) {
  IdleFixture f;
  f.SetUp(/*idle_enters=*/false);
  // Heartbeats keep its lease alive; the deadline, not the lease, evicts it.
  for (absl::Duration d = absl::Seconds(1); d < f.s.entry_timeout; d += absl::Seconds(1)) {
    for (uint64_t id : {1, 2, 3}) Beat(f.m, id, 2, f.barrier_at + d);
    Beat(f.m, 9, 0, f.barrier_at + d);
    EXPECT_FALSE(f.m.Tick(f.barrier_at + d, &f.ev));
  }
  EXPECT_FALSE(f.m.Tick(f.barrier_at + f.s.entry_timeout - absl::Milliseconds(1), &f.ev));
  EXPECT_TRUE(f.ev.empty());
  ASSERT_TRUE(f.m.Tick(f.barrier_at + f.s.entry_timeout, &f.ev));
  EXPECT_EQ(f.ev, (std::vector<uint64_t>{9}));
  ASSERT_EQ(f.m.last_evicted().size(), 1u);
  EXPECT_EQ(f.m.last_evicted()[0].agent_id, "idle");
  EXPECT_EQ(f.m.last_evicted()[0].cause, membership::MemberRecord::Cause::kEntry);
  EXPECT_NE(f.m.last_evicted()[0].eviction.find("did not enter epoch 2 within 4000 ms"),
            std::string::npos);
  // The others form the next epoch at once, without it.
  EXPECT_EQ(f.m.latest().number, 3u);
  EXPECT_TRUE(f.m.latest().immediate);
  EXPECT_EQ(f.m.latest().roster, (std::vector<uint64_t>{1, 2, 3}));
}

// Evicted at entry, the idle agent joins again and is admitted at the next
// barrier; it stalls that entry too and is evicted again: now its re-join is
// refused (UNAVAILABLE naming the wait) for one lease, twice that after a
// third eviction, and admitted once the quarantine is over.
TEST(EntryDeadline, AnAgentEvictedAtEntryAgainIsQuarantinedForABackoff) {
  IdleFixture f;
  f.SetUp(/*idle_enters=*/false);
  for (absl::Duration d = absl::Seconds(1); d < f.s.entry_timeout; d += absl::Seconds(1)) {
    for (uint64_t id : {1, 2, 3}) Beat(f.m, id, 2, f.barrier_at + d);
    Beat(f.m, 9, 0, f.barrier_at + d);
    f.m.Tick(f.barrier_at + d, &f.ev);
  }
  absl::Time t = f.barrier_at + f.s.entry_timeout;
  ASSERT_TRUE(f.m.Tick(t, &f.ev));
  ASSERT_EQ(f.ev, (std::vector<uint64_t>{9}));
  uint64_t next_id = 100, rep = 0;
  uint64_t step = f.m.MaxNextStep();
  // Runs the job (members 1-3 report steps and say they run the latest
  // epoch; the idle one never enters) until `idle` is evicted at an entry.
  auto stall_until_evicted = [&](uint64_t idle) {
    f.ev.clear();
    for (int k = 0; k < 2000 && f.ev.empty(); ++k) {
      t += absl::Milliseconds(50);
      ++step;
      for (uint64_t id : {1, 2, 3}) {
        f.m.NoteStep(id, step, t);
        Beat(f.m, id, f.m.latest().number, t);
      }
      if (f.m.Find(idle) != nullptr) Beat(f.m, idle, 0, t);
      f.m.Tick(t, &f.ev);
    }
    ASSERT_EQ(f.ev, (std::vector<uint64_t>{idle}));
  };
  // Second life: admitted (held back to a barrier), evicted again.
  const uint64_t second = next_id++;
  ASSERT_TRUE(f.m.Join(Req("idle", 9), second, t, &rep).ok());
  stall_until_evicted(second);
  // Quarantined for one lease (3 s).
  absl::Status st = f.m.Join(Req("idle", 9), next_id, t, &rep);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_NE(st.message().find("agent_id 'idle' is quarantined for 3000 ms: evicted 2 times"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(f.m.Join(Req("idle", 9), next_id, t + absl::Milliseconds(2999), &rep).code(),
            absl::StatusCode::kUnavailable);
  // Other agents are not affected.
  EXPECT_TRUE(f.m.Join(Req("fresh", 8), next_id++, t, &rep).ok());
  ASSERT_TRUE(f.m.Leave(next_id - 1).ok());
  t += absl::Seconds(3);
  const uint64_t third = next_id++;
  ASSERT_TRUE(f.m.Join(Req("idle", 9), third, t, &rep).ok());
  stall_until_evicted(third);
  st = f.m.Join(Req("idle", 9), next_id, t, &rep);
  EXPECT_NE(st.message().find("quarantined for 6000 ms: evicted 3 times"), std::string::npos)
      << st.message();
  EXPECT_TRUE(f.m.Join(Req("idle", 9), next_id, t + absl::Seconds(6), &rep).ok());
}

TEST(EntryDeadline, MembersThatSayTheyEnterStay) {
  IdleFixture f;
  f.SetUp(/*idle_enters=*/true);
  for (absl::Duration d = absl::Seconds(1); d <= 2 * f.s.entry_timeout; d += absl::Seconds(1)) {
    for (uint64_t id : {1, 2, 3, 9}) Beat(f.m, id, 2, f.barrier_at + d);
    EXPECT_FALSE(f.m.Tick(f.barrier_at + d, &f.ev));
  }
  EXPECT_TRUE(f.ev.empty());
  EXPECT_EQ(f.m.latest().number, 2u);
}

TEST(EntryDeadline, AReportFromTheEpochShowsEntry) {
  IdleFixture f;
  f.SetUp(/*idle_enters=*/false);
  f.m.NoteEpoch(9, 2);  // e.g. its failed entry, reported
  for (uint64_t id : {1, 2, 3}) Beat(f.m, id, 2, f.barrier_at + absl::Seconds(2));
  Beat(f.m, 9, 0, f.barrier_at + absl::Seconds(2));  // heartbeats alone would not show it
  EXPECT_FALSE(f.m.Tick(f.barrier_at + f.s.entry_timeout, &f.ev));
  EXPECT_TRUE(f.ev.empty());
}

// Two epochs in quick succession: the members still in the first one's
// entry (their heartbeats name it, its wire-up cannot be interrupted) are not
// evicted at the second one's deadline; only a member that never entered an
// epoch is.
TEST(EntryDeadline, AMemberStillInAnOlderEntryStays) {
  JobSettings s = Job(3);
  s.min_world_size = 2;
  membership::Membership m(s);
  StartTestEpoch(m, t0, 3);
  std::vector<uint64_t> ev;
  ASSERT_TRUE(m.Leave(3).ok());
  ASSERT_TRUE(m.Tick(t0, &ev));  // epoch 2: members 1 and 2
  ASSERT_EQ(m.latest().number, 2u);
  for (int k = 1; k <= 10; ++k) {
    const absl::Time t = t0 + absl::Seconds(k);
    Beat(m, 1, 1, t);  // still says epoch 1 (leaving its older entry)
    Beat(m, 2, 2, t);
    EXPECT_FALSE(m.Tick(t, &ev)) << k;
  }
  EXPECT_TRUE(ev.empty());
  EXPECT_EQ(m.latest().number, 2u);
}

// A heartbeat of a member in `epoch` whose entry waits on `peer` for
// `waited` already.
void BeatWaiting(membership::Membership& m, uint64_t id, uint64_t epoch, uint64_t peer,
                 absl::Duration waited, absl::Time t) {
  gradex::v1::HeartbeatRequest h;
  h.set_member_id(id);
  h.set_epoch(epoch);
  h.set_next_step(m.Find(id)->next_step);
  h.mutable_waiting()->set_epoch(epoch);
  h.mutable_waiting()->set_step(m.Find(id)->next_step);
  h.mutable_waiting()->set_peer_rank(m.RankIn(m.latest(), peer));
  h.mutable_waiting()->set_waited_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(waited)));
  ASSERT_TRUE(m.Heartbeat(h, t).ok()) << id;
}

// Members 1..n entered epoch 1; member n+1 leaves, so epoch 2 (members
// 1..n, immediate) starts its entry at t0. Member `stalled` entered epoch 1
// and says it enters epoch 2, but never answers its peers there; each member
// in `waiters` waits on what its map entry names (directly or through
// another waiter), a second before the deadline, for most of the entry.
// Returns the evictions by the deadline, and their records.
struct BlameRun {
  std::vector<uint64_t> evicted;
  std::vector<membership::MemberRecord> records;
  uint64_t latest = 0;
};
BlameRun RunBlame(int n, const std::vector<std::pair<uint64_t, uint64_t>>& waiters,
                  absl::Duration waited) {
  JobSettings s = Job(n + 1);
  s.min_world_size = 1;
  membership::Membership m(s);
  BlameRun run;
  StartTestEpoch(m, t0, n + 1);
  if (::testing::Test::HasFatalFailure()) return run;
  std::vector<uint64_t> ev;
  EXPECT_TRUE(m.Leave(n + 1).ok());
  EXPECT_TRUE(m.Tick(t0, &ev));
  EXPECT_EQ(m.latest().number, 2u);
  for (absl::Duration d = absl::Seconds(1); d < 2 * s.entry_timeout; d += absl::Seconds(1)) {
    const absl::Time t = t0 + d;
    for (uint64_t id = 1; id <= static_cast<uint64_t>(n); ++id) {
      auto w = std::find_if(waiters.begin(), waiters.end(),
                            [&](const auto& p) { return p.first == id; });
      if (m.Find(id) == nullptr) continue;
      if (w != waiters.end() && m.latest().number == 2 && m.Find(w->second) != nullptr) {
        BeatWaiting(m, id, 2, w->second, std::min(waited, d), t);
      } else {
        Beat(m, id, m.latest().number, t);
      }
    }
    m.Tick(t, &ev);
    if (d < s.entry_timeout) {
      EXPECT_TRUE(ev.empty()) << "before the deadline, at " << d;
    }
    for (const membership::MemberRecord& r : m.last_evicted()) run.records.push_back(r);
  }
  run.evicted = ev;
  run.latest = m.latest().number;
  return run;
}

TEST(EntryDeadline, AMemberAMajorityOfItsPeersWaitOnIsEvictedAndNamed) {
  // Four members; 4 stalls. 1 waits on it directly, 2 through 1 (the
  // dissemination exchange), 3 does not wait: 2 of 3 others blame 4.
  BlameRun run = RunBlame(4, {{1, 4}, {2, 1}}, absl::Seconds(3));
  EXPECT_EQ(run.evicted, (std::vector<uint64_t>{4}));
  ASSERT_EQ(run.records.size(), 1u);
  EXPECT_EQ(run.records[0].agent_id, "a4");
  EXPECT_EQ(run.records[0].cause, membership::MemberRecord::Cause::kEntry);
  EXPECT_NE(run.records[0].eviction.find("blamed by 2 of 3 members for not entering epoch 2"),
            std::string::npos)
      << run.records[0].eviction;
  EXPECT_EQ(run.latest, 3u);  // the others go on without it
}

// Epoch 1 runs 120 steps; then member 4 stalls (a trainer pausing between
// steps) and the three others wait on it, past the entry deadline: it
// entered the epoch long ago, so it stays (the stall detector names it).
TEST(EntryDeadline, AMemberThatRanStepsOfTheEpochIsNotBlamedForItsEntry) {
  JobSettings s = Job(4);
  membership::Membership m(s);
  StartTestEpoch(m, t0, 4);
  std::vector<uint64_t> ev;
  const absl::Time ran = t0 + absl::Seconds(1);
  for (uint64_t id = 1; id <= 4; ++id) m.NoteStep(id, 119, ran);
  for (absl::Duration d = absl::Seconds(2); d < 3 * s.entry_timeout; d += absl::Seconds(1)) {
    const absl::Time t = t0 + d;
    if (m.Find(4) == nullptr) break;  // evicted: the failure below names why
    for (uint64_t id = 1; id <= 3; ++id) BeatWaiting(m, id, 1, 4, t - ran, t);
    Beat(m, 4, 1, t);
    m.Tick(t, &ev);
  }
  EXPECT_TRUE(ev.empty());
  for (const membership::MemberRecord& r : m.last_evicted())
    ADD_FAILURE() << r.agent_id << ": " << r.eviction;
  EXPECT_EQ(m.latest().number, 1u);
}

TEST(EntryDeadline, OneLiarOfThreeOthersCannotEvict) {
  BlameRun run = RunBlame(4, {{1, 4}}, absl::Seconds(3));
  EXPECT_TRUE(run.evicted.empty());
  EXPECT_EQ(run.latest, 2u);
}

TEST(EntryDeadline, ShortWaitsBlameNobody) {
  // A straggler's peers wait on it briefly every step: not a stalled entry.
  BlameRun run = RunBlame(4, {{1, 4}, {2, 4}, {3, 4}}, absl::Milliseconds(500));
  EXPECT_TRUE(run.evicted.empty());
  EXPECT_EQ(run.latest, 2u);
}

TEST(EntryDeadline, WithTwoMembersTheOtherOneDecides) {
  // 1 of 1 other is a strict majority: the job could not go on either way.
  BlameRun run = RunBlame(2, {{1, 2}}, absl::Seconds(3));
  EXPECT_EQ(run.evicted, (std::vector<uint64_t>{2}));
  ASSERT_EQ(run.records.size(), 1u);
  EXPECT_NE(run.records[0].eviction.find("blamed by 1 of 1 members"), std::string::npos);
}

// A member blamed at the entry deadline that joins again at once (its
// heartbeats go on while it stalls) is left out of the survivors' epoch, so
// their superseded entry ends; it comes in at the next barrier.
TEST(EntryDeadline, ABlamedMemberThatJoinsAgainWaitsForTheNextBarrier) {
  JobSettings s = Job(4);
  s.min_world_size = 1;
  s.loss_settle = absl::Seconds(1);  // the re-join comes within it
  membership::Membership m(s);
  StartTestEpoch(m, t0, 4);
  std::vector<uint64_t> ev;
  ASSERT_TRUE(m.Leave(4).ok());
  absl::Time t = t0;
  for (; m.latest().number == 1 && t < t0 + absl::Seconds(2); t += absl::Milliseconds(100)) {
    m.Tick(t, &ev);
  }
  ASSERT_EQ(m.latest().number, 2u);  // members 1, 2, 3 at once
  for (absl::Duration d = absl::Seconds(1); ev.empty() && d < 2 * s.entry_timeout;
       d += absl::Seconds(1)) {
    t = std::max(t, t0 + d);
    for (uint64_t id : {1, 2}) BeatWaiting(m, id, 2, 3, d, t);
    Beat(m, 3, 2, t);
    m.Tick(t, &ev);
  }
  ASSERT_EQ(ev, (std::vector<uint64_t>{3}));
  uint64_t replaced = 0;
  ASSERT_TRUE(m.Join(Req("a3", 3), 30, t, &replaced).ok());
  for (int i = 1; i <= 30 && m.latest().number == 2; ++i) {
    t += absl::Milliseconds(100);
    for (uint64_t id : {1, 2, 30}) Beat(m, id, m.latest().number, t);
    m.Tick(t, &ev);
  }
  ASSERT_EQ(m.latest().number, 3u);
  EXPECT_EQ(m.latest().roster, (std::vector<uint64_t>{1, 2}));
  EXPECT_TRUE(m.latest().immediate);
  t += absl::Milliseconds(100);
  ASSERT_TRUE(m.Tick(t, &ev));
  EXPECT_EQ(m.latest().number, 4u);
  EXPECT_EQ(m.latest().roster, (std::vector<uint64_t>{1, 2, 30}));
  EXPECT_FALSE(m.latest().immediate);
  EXPECT_EQ(m.latest().effective_step % s.barrier_period, 0u);
}

}  // namespace
}  // namespace gradex::coordinator
