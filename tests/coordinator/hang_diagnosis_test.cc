// Hang diagnosis from the heartbeats' wait states: the wait-for graph (all
// ranks on one step waiting on one that is not in the exchange, a chain, a
// cycle), the coordinator's log line and stalled-steps count for a stall in
// which nobody is behind, a member whose heartbeats stopped, a member still
// in an older epoch, and the validation of WaitState.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "prometheus/registry.h"
#include "services/coordinator/coordinator.h"
#include "services/coordinator/hang_scan.h"
#include "services/coordinator/hangs/wait_graph.h"
#include "services/coordinator/validate.h"
#include "tests/coordinator/join_all.h"
#include "version/version.h"

namespace gradex::coordinator {
namespace {

void Contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in:\n" << text;
}

TEST(DiagnoseWaits, AllWaitOnOneRankNotInTheExchange) {
  hangs::WaitDiagnosis d = hangs::DiagnoseWaits({2, 2, -1, 2});
  ASSERT_EQ(d.causes.size(), 1u);
  EXPECT_EQ(d.causes[0].ranks, (std::vector<int>{2}));
  EXPECT_EQ(d.causes[0].waiters, (std::vector<int>{0, 1, 3}));
  EXPECT_TRUE(d.cycles.empty());
}

TEST(DiagnoseWaits, ChainEndsAtTheIdleRank) {
  // 0 -> 1 -> 2, 2 idle; 3 idle and waited on by nobody: not named.
  hangs::WaitDiagnosis d = hangs::DiagnoseWaits({1, 2, -1, -1});
  ASSERT_EQ(d.causes.size(), 1u);
  EXPECT_EQ(d.causes[0].ranks, (std::vector<int>{2}));
  EXPECT_EQ(d.causes[0].waiters, (std::vector<int>{0, 1}));
  EXPECT_TRUE(d.cycles.empty());
}

TEST(DiagnoseWaits, CycleAndItsWaiters) {
  // 2 -> 3 -> 1 -> 2 is a cycle, 0 waits on it, 4 waits on 5 (idle).
  hangs::WaitDiagnosis d = hangs::DiagnoseWaits({3, 2, 3, 1, 5, -1});
  ASSERT_EQ(d.cycles.size(), 1u);
  EXPECT_EQ(d.cycles[0].ranks, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(d.cycles[0].waiters, (std::vector<int>{0}));
  ASSERT_EQ(d.causes.size(), 1u);
  EXPECT_EQ(d.causes[0].ranks, (std::vector<int>{5}));
  EXPECT_EQ(d.causes[0].waiters, (std::vector<int>{4}));
}

TEST(DiagnoseWaits, OutOfRangeAndSelfWaits) {
  hangs::WaitDiagnosis d = hangs::DiagnoseWaits({7, -5, -1});
  EXPECT_TRUE(d.empty());
  d = hangs::DiagnoseWaits({0, -1});  // waiting on itself: a cycle of one
  ASSERT_EQ(d.cycles.size(), 1u);
  EXPECT_EQ(d.cycles[0].ranks, (std::vector<int>{0}));
}

TEST(ValidateHeartbeat, WaitState) {
  gradex::v1::HeartbeatRequest h;
  h.set_member_id(1);
  EXPECT_TRUE(ValidateHeartbeat(h).ok());
  gradex::v1::WaitState* w = h.mutable_waiting();
  w->set_epoch(3);
  w->set_step(9);
  w->set_peer_rank(65535);
  w->set_waited_ms(1500);
  EXPECT_TRUE(ValidateHeartbeat(h).ok());
  for (int bad : {-1, 65536}) {
    w->set_peer_rank(bad);
    EXPECT_EQ(ValidateHeartbeat(h).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  w->set_peer_rank(0);
  w->set_epoch(0);
  EXPECT_EQ(ValidateHeartbeat(h).code(), absl::StatusCode::kInvalidArgument);
  w->set_epoch(3);
  w->set_waited_ms(86400u * 1000u + 1);
  EXPECT_EQ(ValidateHeartbeat(h).code(), absl::StatusCode::kInvalidArgument);
}

const absl::Time t0 = absl::FromUnixSeconds(1000);

class HangTest : public testing::Test {
 protected:
  void Start(int world, CoordinatorMetrics* metrics = nullptr) {
    JobSettings s;
    s.job_id = "job";
    s.world_size = s.min_world_size = world;
    s.algorithm = "spardl-bsag";
    s.lease = absl::Seconds(3);
    s.step_deadline = absl::Seconds(4);
    s.barrier_period = 64;
    s.plan_lead_steps = 64;
    c_ = std::make_unique<Coordinator>(s, metrics);
    ids_ = JoinAll(*c_, world, t0);
    ASSERT_EQ(ids_.size(), static_cast<size_t>(world));
    c_->Tick(t0);
    ASSERT_EQ(c_->epoch(), 1u);
    // Everyone finished steps 0..4 and runs step 5 next.
    for (int r = 0; r < world; ++r) Report(r, 4, t0);
  }
  // `rank`'s report of `step` in epoch 1 at `t` (failed with `error` if given).
  void Report(int rank, uint64_t step, absl::Time t, const std::string& error = "") {
    gradex::v1::StepReport rep;
    rep.set_member_id(ids_[rank]);
    rep.set_epoch(1);
    rep.set_step(step);
    if (!error.empty()) rep.set_error(error);
    bool accepted = false;
    ASSERT_TRUE(c_->Report(rep, t, &accepted).ok());
  }
  // A heartbeat of `rank` at `t`; waiting on `peer` for `waited_ms` if peer >= 0.
  void Beat(int rank, absl::Time t, int peer = -1, uint32_t waited_ms = 0, uint64_t epoch = 1) {
    gradex::v1::HeartbeatRequest h;
    h.set_member_id(ids_[rank]);
    h.set_epoch(epoch);
    h.set_next_step(5);
    if (peer >= 0) {
      h.mutable_waiting()->set_epoch(1);
      h.mutable_waiting()->set_step(5);
      h.mutable_waiting()->set_peer_rank(peer);
      h.mutable_waiting()->set_waited_ms(waited_ms);
    }
    ASSERT_TRUE(ValidateHeartbeat(h).ok());
    ASSERT_TRUE(c_->Heartbeat(h, t).ok());
  }
  std::string TickLog(absl::Time t) {
    testing::internal::CaptureStderr();
    c_->Tick(t);
    return testing::internal::GetCapturedStderr();
  }

  std::unique_ptr<Coordinator> c_;
  std::vector<uint64_t> ids_;
};

// gradex_coordinator_stall_blames_total by "rank/host".
std::map<std::string, double> Blames(prometheus::Registry& r) {
  std::map<std::string, double> out;
  for (const prometheus::MetricFamily& f : r.Collect()) {
    if (f.name != "gradex_coordinator_stall_blames_total") continue;
    for (const prometheus::ClientMetric& m : f.metric) {
      std::string rank, host;
      for (const prometheus::ClientMetric::Label& l : m.label) {
        (l.name == "rank" ? rank : host) = l.value;
      }
      out[rank + "/" + host] = m.counter.value;
    }
  }
  return out;
}

// The blamed rank as a labelled series: every rank's at 0 from the epoch's
// start, the one not in the exchange at 1, once per stalled step; the
// laggard rule blames the ranks behind.
TEST_F(HangTest, StallsAreCountedAgainstTheBlamedRank) {
  prometheus::Registry registry;
  CoordinatorMetrics metrics(registry);
  Start(4, &metrics);
  using M = std::map<std::string, double>;
  EXPECT_EQ(Blames(registry), (M{{"0/h0", 0}, {"1/h1", 0}, {"2/h2", 0}, {"3/h3", 0}}));
  const absl::Time t1 = t0 + absl::Milliseconds(2500);
  for (int r : {0, 1, 3}) Beat(r, t1, 2, 2100);
  Beat(2, t1);
  TickLog(t1);
  EXPECT_EQ(Blames(registry), (M{{"0/h0", 0}, {"1/h1", 0}, {"2/h2", 1}, {"3/h3", 0}}));
  const absl::Time t2 = t1 + absl::Milliseconds(500);
  for (int r : {0, 1, 3}) Beat(r, t2, 2, 2600);
  Beat(2, t2);
  TickLog(t2);
  EXPECT_EQ(Blames(registry)["2/h2"], 1) << "one step, one blame";

  // Laggards: ranks 0 and 2 finish step 5, 1 and 3 do not within the deadline.
  prometheus::Registry registry2;
  CoordinatorMetrics metrics2(registry2);
  Start(4, &metrics2);
  for (int r : {0, 2}) Report(r, 5, t0);
  const absl::Time t3 = t0 + absl::Seconds(1);
  for (int r : {0, 1, 2, 3}) Beat(r, t3);
  TickLog(t3);
  const absl::Time t4 = t3 + absl::Milliseconds(4100);
  for (int r : {0, 1, 2, 3}) Beat(r, t4);
  TickLog(t4);
  EXPECT_EQ(Blames(registry2), (M{{"0/h0", 0}, {"1/h1", 1}, {"2/h2", 0}, {"3/h3", 1}}));
}

TEST_F(HangTest, EveryRankOnTheSameStepNamesTheOneNotInTheExchange) {
  Start(4);
  // Nobody is behind (all run step 5 next): the laggard rule sees nothing.
  const absl::Time t1 = t0 + absl::Milliseconds(1500);
  for (int r : {0, 1, 3}) Beat(r, t1, 2, 1200);
  Beat(2, t1);                 // alive, not waiting: stuck outside the exchange
  EXPECT_EQ(TickLog(t1), "");  // 1.2 s < half the 4 s deadline
  EXPECT_EQ(c_->stalled_steps(), 0u);
  const absl::Time t2 = t0 + absl::Milliseconds(2500);
  for (int r : {0, 1, 3}) Beat(r, t2, 2, 2100);
  Beat(2, t2);
  std::string log = TickLog(t2);
  Contains(log, ("step 5 stalled in epoch 1 (waiting for 2.1s): rank 2 (host 'h2', "
                 "agent 'a2') is not in the exchange of step 5: ranks 0, 1, 3 wait on "
                 "it\n"));
  EXPECT_EQ(c_->stalled_steps(), 1u);
  // Once per step, also when the waiters then fail the step and rank 2 lags
  // behind them (the laggard rule names it without counting it again).
  for (int r : {0, 1, 3}) {
    testing::internal::CaptureStderr();
    Report(r, 5, t2, "deadline");
    testing::internal::GetCapturedStderr();
  }
  const absl::Time t3 = t2 + absl::Seconds(1);
  for (int r : {0, 1, 2, 3}) Beat(r, t3);
  EXPECT_EQ(TickLog(t3), "");
  const absl::Time t4 = t3 + absl::Milliseconds(4100);
  for (int r : {0, 1, 2, 3}) Beat(r, t4);
  Contains(TickLog(t4), ("step 5 stalled in epoch 1: ranks 2 (h2, next step 5)"));
  EXPECT_EQ(c_->stalled_steps(), 1u);
}

TEST_F(HangTest, LaggardLineAddsWhomItsPeersWaitOn) {
  Start(3);
  for (int r : {0, 2}) Report(r, 5, t0);  // ranks 0 and 2 finish step 5, rank 1 does not
  const absl::Time t1 = t0 + absl::Seconds(1);
  for (int r : {0, 1, 2}) Beat(r, t1);
  EXPECT_EQ(TickLog(t1), "");  // the frontier (6) starts its clock here
  // Ranks 0 and 2 wait in step 6 on rank 1 for longer than half the
  // deadline: ranks are behind, so that is the laggard rule's stall.
  auto beat6 = [&](int rank, absl::Time t, uint32_t waited_ms) {
    gradex::v1::HeartbeatRequest h;
    h.set_member_id(ids_[rank]);
    h.set_epoch(1);
    h.set_next_step(6);
    h.mutable_waiting()->set_epoch(1);
    h.mutable_waiting()->set_step(6);
    h.mutable_waiting()->set_peer_rank(1);
    h.mutable_waiting()->set_waited_ms(waited_ms);
    ASSERT_TRUE(c_->Heartbeat(h, t).ok());
  };
  const absl::Time t2 = t1 + absl::Milliseconds(2500);
  for (int r : {0, 2}) beat6(r, t2, 2400);
  Beat(1, t2);
  EXPECT_EQ(TickLog(t2), "");
  EXPECT_EQ(c_->stalled_steps(), 0u);
  const absl::Time t3 = t1 + absl::Milliseconds(4100);
  for (int r : {0, 2}) beat6(r, t3, 4000);
  Beat(1, t3);
  Contains(TickLog(t3),
           "step 5 stalled in epoch 1: ranks 1 (h1, next step 5) have not arrived (the furthest "
           "rank finished step 5); rank 1 (host 'h1', agent 'a1') is still in step 5: ranks 0, 2 "
           "wait on it\n");
  EXPECT_EQ(c_->stalled_steps(), 1u);
}

TEST_F(HangTest, ChainNamesTheEndAndEveryoneBehindIt) {
  Start(4);
  const absl::Time t = t0 + absl::Milliseconds(2500);
  Beat(0, t, 1, 2400);
  Beat(1, t, 2, 2300);
  Beat(2, t);
  Beat(3, t);
  Contains(TickLog(t), (": rank 2 (host 'h2', agent 'a2') is not in the exchange of "
                        "step 5: ranks 0, 1 wait on it\n"));
  EXPECT_EQ(c_->stalled_steps(), 1u);
}

TEST_F(HangTest, CycleIsNamed) {
  Start(3);
  const absl::Time t = t0 + absl::Milliseconds(2500);
  Beat(0, t, 1, 2400);
  Beat(1, t, 0, 2400);
  Beat(2, t, 1, 2200);
  Contains(TickLog(t),
           (": ranks 0 -> 1 -> 0 wait on each other (a cycle); rank 2 waits on them\n"));
  EXPECT_EQ(c_->stalled_steps(), 1u);
}

TEST_F(HangTest, MemberWhoseHeartbeatsStopped) {
  Start(3);
  Beat(2, t0 + absl::Milliseconds(100));  // its last heartbeat (lease 3 s, interval 1 s)
  const absl::Time t = t0 + absl::Milliseconds(2500);
  Beat(0, t, 2, 2400);
  Beat(1, t, 0, 2000);
  Contains(TickLog(t), (": rank 2 (host 'h2', agent 'a2') stopped heartbeating 2.4s "
                        "ago: ranks 0, 1 wait on it\n"));
  EXPECT_EQ(c_->stalled_steps(), 1u);
}

TEST_F(HangTest, StaleWaitsAreIgnored) {
  Start(2);
  const absl::Time u = t0 + absl::Milliseconds(3000);
  gradex::v1::HeartbeatRequest w;
  w.set_member_id(ids_[0]);
  w.set_epoch(1);
  w.set_next_step(5);
  w.mutable_waiting()->set_epoch(7);  // never published: refused, naming the field
  w.mutable_waiting()->set_step(5);
  w.mutable_waiting()->set_peer_rank(1);
  w.mutable_waiting()->set_waited_ms(2900);
  absl::Status refused = c_->Heartbeat(w, u).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("waiting.epoch"), absl::string_view::npos) << refused;
  w.clear_waiting();
  ASSERT_TRUE(c_->Heartbeat(w, u).ok());
  w.mutable_waiting()->set_waited_ms(2900);
  w.set_member_id(ids_[1]);
  w.mutable_waiting()->set_epoch(1);
  w.mutable_waiting()->set_step(4);  // it runs step 5 next: step 4 is over
  w.mutable_waiting()->set_peer_rank(0);
  ASSERT_TRUE(c_->Heartbeat(w, u).ok());
  EXPECT_EQ(TickLog(u), "");
  EXPECT_EQ(c_->stalled_steps(), 0u);
  // The same waits made current are diagnosed (a cycle of two).
  w.mutable_waiting()->set_step(5);
  ASSERT_TRUE(c_->Heartbeat(w, u).ok());
  w.set_member_id(ids_[0]);
  w.mutable_waiting()->set_peer_rank(1);
  ASSERT_TRUE(c_->Heartbeat(w, u).ok());
  Contains(TickLog(u), ": ranks 0 -> 1 -> 0 wait on each other (a cycle)\n");
  EXPECT_EQ(c_->stalled_steps(), 1u);
}

TEST(DescribeHang, OlderEpochIsNamed) {
  JobSettings s;
  s.job_id = "job";
  s.world_size = s.min_world_size = 2;
  s.max_world_size = 3;  // the third is admitted (elastic growth)
  s.lease = absl::Seconds(3);
  s.barrier_period = 8;
  s.plan_lead_steps = 8;
  membership::Membership m(s);
  uint64_t rep = 0;
  std::vector<uint64_t> ev;
  for (int i = 0; i < 3; ++i) {
    gradex::v1::JoinRequest r;
    r.set_job_id("job");
    r.set_agent_id("a" + std::to_string(i));
    r.set_host("h" + std::to_string(i));
    r.set_local_rank(i);
    r.set_ucx_address("addr");
    r.set_wire_protocol(gradex::version::kWireProtocol);
    ASSERT_TRUE(m.Join(r, 10 + i, t0, &rep).ok());
    m.Tick(t0, &ev);  // epoch 1 of two, then epoch 2 admitting the third
  }
  ASSERT_EQ(m.latest().number, 2u);
  ASSERT_EQ(m.latest().roster, (std::vector<uint64_t>{10, 11, 12}));
  auto beat = [&](uint64_t id, uint64_t epoch, int peer) {
    gradex::v1::HeartbeatRequest h;
    h.set_member_id(id);
    h.set_epoch(epoch);
    h.set_next_step(8);
    if (peer >= 0) {
      h.mutable_waiting()->set_epoch(2);
      h.mutable_waiting()->set_step(8);
      h.mutable_waiting()->set_peer_rank(peer);
      h.mutable_waiting()->set_waited_ms(1500);
    }
    ASSERT_TRUE(m.Heartbeat(h, t0).ok());
  };
  beat(10, 2, 2);
  beat(11, 1, -1);  // never entered epoch 2
  beat(12, 2, 1);
  EpochWaits w = ScanWaits(m, m.latest(), t0);
  ASSERT_TRUE(w.any);
  EXPECT_EQ(w.step, 8u);
  EXPECT_EQ(w.oldest, absl::Milliseconds(1500));
  EXPECT_EQ(DescribeHang(m, m.latest(), w, t0, absl::Seconds(2)),
            "rank 1 (host 'h1', agent 'a1') still runs epoch 1: ranks 0, 2 wait on it");
}

}  // namespace
}  // namespace gradex::coordinator
