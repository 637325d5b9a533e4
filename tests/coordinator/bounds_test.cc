// Hostile numbers: epochs, steps and world sizes a
// member sends are bounded by what the coordinator knows, with a refusal
// naming the field; Joins are bounded by the job (RESOURCE_EXHAUSTED past
// the members an epoch may have plus a spare) and no epoch grows past
// max_world_size.
#include <gtest/gtest.h>

#include <string>

#include "services/coordinator/coordinator.h"
#include "services/coordinator/server.h"
#include "services/coordinator/validate.h"
#include "tests/coordinator/join_all.h"
#include "tests/coordinator/test_job.h"
#include "version/version.h"

namespace gradex::coordinator {
namespace {

const absl::Time t0 = absl::FromUnixSeconds(7000);

JobSettings Job(int world) {
  JobSettings s = TestJob(world, absl::Seconds(100));
  s.min_publish_interval = absl::ZeroDuration();
  return s;
}

gradex::v1::JoinRequest Req(const std::string& agent, int local_rank = 0) {
  return TestJoin(agent, local_rank, "addr");
}

void ExpectRefused(const absl::Status& s, absl::StatusCode code, const std::string& field) {
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_NE(std::string(s.message()).find(field), std::string::npos) << s;
}

TEST(Bounds, RejoinEpochPastWhatAgentsAcceptIsRefused) {
  Coordinator c(Job(4), nullptr);
  for (uint64_t e : {uint64_t{1} << 32, ~uint64_t{0}, (uint64_t{1} << 31) + 1}) {
    gradex::v1::JoinRequest r = Req("x");
    r.set_last_epoch(e);
    r.set_last_rank(0);
    r.set_last_world_size(4);
    ExpectRefused(c.Join(r, t0).status(), absl::StatusCode::kInvalidArgument, "last_epoch");
  }
  EXPECT_EQ(c.members(), 0u);
  // After this coordinator formed an epoch, no member ran a later one.
  JoinAll(c, 4, t0);
  c.Tick(t0);
  ASSERT_EQ(c.epoch(), 1u);
  gradex::v1::JoinRequest r = Req("late");
  r.set_last_epoch(2);
  r.set_last_rank(0);
  r.set_last_world_size(4);
  ExpectRefused(c.Join(r, t0).status(), absl::StatusCode::kInvalidArgument, "last_epoch");
}

TEST(Bounds, RejoinClaimingOneMemberDoesNotOpenASmallEpoch) {
  Coordinator c(Job(4), nullptr);
  gradex::v1::JoinRequest r = Req("liar");
  r.set_last_epoch(9);
  r.set_last_rank(0);
  r.set_last_world_size(1);
  ASSERT_TRUE(c.Join(r, t0).ok());
  c.Tick(t0);
  EXPECT_EQ(c.plan(), nullptr) << "a 1-member epoch in a world_size 4 job";
  r.set_last_world_size(5);  // past the job's largest epoch
  r.set_agent_id("liar2");
  ExpectRefused(c.Join(r, t0).status(), absl::StatusCode::kInvalidArgument, "last_world_size");
  for (int i = 1; i < 4; ++i) ASSERT_TRUE(c.Join(Req("a" + std::to_string(i), i), t0).ok());
  c.Tick(t0);
  ASSERT_NE(c.plan(), nullptr);
  EXPECT_EQ(c.plan()->members_size(), 4);
  EXPECT_EQ(c.plan()->epoch(), 10u);
}

TEST(Bounds, HeartbeatStepFarAheadIsRefusedAndLateJoinersStillEnter) {
  Coordinator c(Job(3), nullptr);
  std::vector<uint64_t> ids = JoinAll(c, 3, t0);
  c.Tick(t0);
  ASSERT_EQ(c.epoch(), 1u);
  const absl::Time t1 = t0 + absl::Seconds(1);
  gradex::v1::HeartbeatRequest hb;
  hb.set_member_id(ids[0]);
  hb.set_epoch(1);
  hb.set_next_step(1000000000000ull);
  ExpectRefused(c.Heartbeat(hb, t1).status(), absl::StatusCode::kInvalidArgument, "next_step");
  hb.set_next_step(30);
  hb.set_epoch(7);  // never published
  ExpectRefused(c.Heartbeat(hb, t1).status(), absl::StatusCode::kInvalidArgument, "epoch");
  hb.set_epoch(1);
  hb.mutable_waiting()->set_epoch(1);
  hb.mutable_waiting()->set_step(uint64_t{1} << 40);
  ExpectRefused(c.Heartbeat(hb, t1).status(), absl::StatusCode::kInvalidArgument, "waiting.step");
  hb.clear_waiting();
  ASSERT_TRUE(c.Heartbeat(hb, t1).ok());
  // Reports: a step far ahead, an epoch never published.
  gradex::v1::StepReport rep;
  rep.set_member_id(ids[1]);
  rep.set_epoch(1);
  rep.set_step(999999999999ull);
  bool accepted = false;
  ExpectRefused(c.Report(rep, t1, &accepted), absl::StatusCode::kInvalidArgument, "step");
  rep.set_step(29);
  rep.set_epoch(2);
  ExpectRefused(c.Report(rep, t1, &accepted), absl::StatusCode::kInvalidArgument, "epoch");
  // A late joiner (elastic growth allowed to 4) enters at the barrier after
  // the honest steps, not a trillion steps on.
  JobSettings s = Job(3);
  s.max_world_size = 4;
  Coordinator e(s, nullptr);
  ids = JoinAll(e, 3, t0);
  e.Tick(t0);
  hb.set_member_id(ids[0]);
  hb.set_next_step(1000000000000ull);
  EXPECT_FALSE(e.Heartbeat(hb, t1).ok());
  ASSERT_TRUE(e.Join(Req("late", 3), t1).ok());
  e.Tick(t1);
  ASSERT_EQ(e.epoch(), 2u);
  EXPECT_EQ(e.plan()->members_size(), 4);
  EXPECT_LE(e.plan()->effective_step(), 64u);
}

TEST(Bounds, StepClaimsGrowNoFasterThanAJobCanRun) {
  Coordinator c(Job(1), nullptr);
  std::vector<uint64_t> ids = JoinAll(c, 1, t0);
  c.Tick(t0);
  gradex::v1::HeartbeatRequest hb;
  hb.set_member_id(ids[0]);
  hb.set_epoch(1);
  // One second: at most kMaxStepsPerSecond steps plus the slack.
  hb.set_next_step(kMaxStepsPerSecond);
  EXPECT_TRUE(c.Heartbeat(hb, t0 + absl::Seconds(1)).ok());
  hb.set_next_step(3 * kMaxStepsPerSecond);
  ExpectRefused(c.Heartbeat(hb, t0 + absl::Seconds(2)).status(), absl::StatusCode::kInvalidArgument,
                "next_step");
}

TEST(Bounds, JoinFloodIsRefusedPastTheJobAndEpochsStayAtWorldSize) {
  Coordinator c(Job(4), nullptr);
  JoinAll(c, 4, t0);
  c.Tick(t0);
  ASSERT_EQ(c.epoch(), 1u);
  int accepted = 0, exhausted = 0;
  for (int i = 0; i < 5000; ++i) {
    auto r = c.Join(Req("flood" + std::to_string(i), i % 60000), t0);
    if (r.ok()) {
      ++accepted;
    } else {
      EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
      ++exhausted;
    }
    if (i % 100 == 0) c.Tick(t0);
  }
  c.Tick(t0);
  // world_size 4 plus a spare of max(2, 4 / 4) = 2.
  EXPECT_EQ(accepted, 2);
  EXPECT_EQ(exhausted, 4998);
  EXPECT_EQ(c.members(), 6u);
  EXPECT_EQ(c.epoch(), 1u) << "no epoch churn: the spares wait for a place";
  EXPECT_EQ(c.plan()->members_size(), 4);
}

TEST(Bounds, ElasticGrowthStopsAtMaxWorldSize) {
  JobSettings s = Job(2);
  s.max_world_size = 3;
  Coordinator c(s, nullptr);
  JoinAll(c, 2, t0);
  c.Tick(t0);
  ASSERT_TRUE(c.Join(Req("b", 5), t0).ok());
  ASSERT_TRUE(c.Join(Req("c", 6), t0).ok());
  c.Tick(t0);
  ASSERT_EQ(c.epoch(), 2u);
  EXPECT_EQ(c.plan()->members_size(), 3);
  c.Tick(t0);
  EXPECT_EQ(c.epoch(), 2u);
  EXPECT_EQ(c.members(), 4u);
}

}  // namespace
}  // namespace gradex::coordinator

namespace gradex::coordinator {
namespace {

// The address one member publishes reaches every peer, so
// the coordinator takes only a listener's IP:port, and refuses a member
// whose UCX cannot talk to the members'.
TEST(DataPlane, MalformedAddressesAreRefusedNamingTheField) {
  gradex::v1::JoinRequest r = Req("a");
  r.set_ucx_version("1.13");
  r.set_ucx_transports("tcp");
  r.set_ucx_address("127.0.0.1:4000");
  r.set_wire_protocol(gradex::version::kWireProtocol);
  EXPECT_TRUE(ValidateJoin(r).ok()) << ValidateJoin(r);
  r.set_ucx_address("[::1]:4000");
  r.set_wire_protocol(gradex::version::kWireProtocol);
  EXPECT_TRUE(ValidateJoin(r).ok()) << ValidateJoin(r);
  for (const std::string& bad :
       {std::string(64, '\x07'), std::string("127.0.0.1"), std::string("127.0.0.1:0"),
        std::string("127.0.0.1:65536"), std::string("0.0.0.0:4000"),
        std::string("127.attacker.example:7006"), std::string("1.2.3.4:5x"),
        std::string("[::1:4000")}) {
    r.set_ucx_address(bad);
    r.set_wire_protocol(gradex::version::kWireProtocol);
    ExpectRefused(ValidateJoin(r), absl::StatusCode::kInvalidArgument, "ucx_address");
  }
  r.set_ucx_address("127.0.0.1:4000");
  r.set_wire_protocol(gradex::version::kWireProtocol);
  r.set_ucx_version("");
  ExpectRefused(ValidateJoin(r), absl::StatusCode::kInvalidArgument, "ucx_version");
  r.set_ucx_version("1.13.1x");
  ExpectRefused(ValidateJoin(r), absl::StatusCode::kInvalidArgument, "ucx_version");
}

TEST(DataPlane, IncompatibleUcxIsRefusedAtJoin) {
  Coordinator c(Job(3), nullptr);
  gradex::v1::JoinRequest r = Req("a", 0);
  r.set_ucx_version("1.13");
  r.set_ucx_transports("tcp,posix");
  ASSERT_TRUE(c.Join(r, t0).ok());
  gradex::v1::JoinRequest old = Req("b", 1);
  old.set_ucx_version("1.12");
  old.set_ucx_transports("tcp");
  ExpectRefused(c.Join(old, t0).status(), absl::StatusCode::kFailedPrecondition, "UCX 1.12");
  gradex::v1::JoinRequest rdma = Req("c", 2);
  rdma.set_ucx_version("1.13");
  rdma.set_ucx_transports("rc");
  ExpectRefused(c.Join(rdma, t0).status(), absl::StatusCode::kFailedPrecondition, "ucx_transports");
  rdma.set_ucx_transports("rc,tcp");
  EXPECT_TRUE(c.Join(rdma, t0).ok());
  EXPECT_EQ(c.members(), 2u);
}

}  // namespace
}  // namespace gradex::coordinator

namespace gradex::coordinator {
namespace {

// A member's text cannot forge log lines, and an
// eviction names the agent and its host.
TEST(LogLines, MemberTextIsEscapedAndEvictionsNameTheAgent) {
  JobSettings s = Job(2);
  s.lease = absl::Seconds(5);
  Coordinator c(s, nullptr);
  std::vector<uint64_t> ids = JoinAll(c, 2, t0);
  c.Tick(t0);
  ASSERT_EQ(c.epoch(), 1u);
  testing::internal::CaptureStderr();
  gradex::v1::StepReport r;
  r.set_member_id(ids[0]);
  r.set_epoch(1);
  r.set_step(3);
  r.set_error("boom\n2026-01-01T00:00:00.000Z gradex-coordinator: evicted member 1");
  bool accepted = false;
  ASSERT_TRUE(c.Report(r, t0, &accepted).ok());
  gradex::v1::LeaveRequest l;
  l.set_member_id(ids[1]);
  l.set_reason("bye\nforged");
  ASSERT_TRUE(c.Leave(l, t0).ok());
  c.Tick(t0 + absl::Seconds(6));  // a0's lease lapses
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("boom\\n2026"), std::string::npos) << log;
  EXPECT_NE(log.find("bye\\nforged"), std::string::npos) << log;
  EXPECT_EQ(log.find("\nforged"), std::string::npos) << log;
  EXPECT_EQ(log.find("\n2026-01-01"), std::string::npos) << log;
  EXPECT_NE(log.find(absl::StrCat("evicted member ", ids[0], " (agent 'a0' on host 'h0')")),
            std::string::npos)
      << log;
}

}  // namespace
}  // namespace gradex::coordinator

namespace gradex::coordinator {
namespace {

// The plaintext loopback check resolves the name and
// binds the numeric address it checked; a name that merely starts with
// "127." is not loopback.
TEST(Loopback, TheAddressBoundIsTheOneChecked) {
  EXPECT_EQ(ResolveLoopback("127.0.0.1").value_or(""), "127.0.0.1");
  EXPECT_EQ(ResolveLoopback("127.1").value_or(""), "127.0.0.1");
  // localhost needs no resolver (RFC 6761): the same without /etc/hosts.
  EXPECT_EQ(ResolveLoopback("localhost").value_or(""), "127.0.0.1");
  EXPECT_EQ(ResolveLoopback("LocalHost").value_or(""), "127.0.0.1");
  EXPECT_EQ(ResolveLoopback("coordinator.localhost").value_or(""), "127.0.0.1");
  for (const char* bad : {"0.0.0.0", "::", "0", "10.1.2.3", "127.attacker.invalid"}) {
    EXPECT_EQ(ResolveLoopback(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  ServerOptions opts;
  opts.listen = "0:0";  // "0" is 0.0.0.0
  auto s = CoordinatorServer::Start(Job(1), opts);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("not a loopback address"), absl::string_view::npos)
      << s.status();
  opts.listen = "127.1:0";
  s = CoordinatorServer::Start(Job(1), opts);
  ASSERT_TRUE(s.ok()) << s.status();
  (*s)->Shutdown();
}

}  // namespace
}  // namespace gradex::coordinator
