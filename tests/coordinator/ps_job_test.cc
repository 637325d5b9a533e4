// Parameter-server jobs in the coordinator: the job config's `ps`
// block and its bounds, roles at join, and the plan's shard assignment and
// worker slots across a server's loss and return.
#include <gtest/gtest.h>

#include "services/coordinator/coordinator.h"
#include "services/coordinator/validate.h"
#include "version/version.h"

namespace gradex::coordinator {
namespace {

const absl::Time t0 = absl::FromUnixSeconds(5000);
const std::string kPs =
    R"({"job_id":"j","world_size":3,"algorithm":"dgs","density":0.01,"lease_ms":1000,)";

TEST(PsJobConfig, DefaultsAndTheRendezvousCountsServers) {
  auto s = ParseJobConfig(kPs + R"("ps":{"layer_sizes":[10,20]}})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->ps.enabled);
  EXPECT_EQ(s->ps.workers, 3);
  EXPECT_EQ(s->ps.servers, 1);
  EXPECT_EQ(s->ps.max_workers, 3);
  EXPECT_EQ(s->world_size, 4);  // 3 workers + 1 server
  EXPECT_EQ(s->min_world_size, 4);
  EXPECT_EQ(s->ps.server_shards, 0u);
  EXPECT_EQ(s->ps.max_staleness, 0u);
  EXPECT_EQ(s->ps.snapshot_interval, absl::Seconds(30));
  EXPECT_EQ(s->ps.layer_sizes, (std::vector<uint32_t>{10, 20}));
  auto t =
      ParseJobConfig(kPs + R"("max_world_size":5,"ps":{"layer_sizes":[7],"servers":2,)"
                           R"("server_shards":3,"max_staleness":4,"snapshot_interval_ms":0}})");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->world_size, 5);
  EXPECT_EQ(t->max_world_size, 7);
  EXPECT_EQ(t->ps.max_workers, 5);
  EXPECT_EQ(t->ps.server_shards, 3u);
  EXPECT_EQ(t->ps.max_staleness, 4u);
  EXPECT_EQ(t->ps.snapshot_interval, absl::ZeroDuration());
}

TEST(PsJobConfig, EveryFieldIsBoundedAndNamed) {
  const std::pair<const char*, const char*> bad[] = {
      {R"("ps":{}})", "ps.layer_sizes"},
      {R"("ps":{"layer_sizes":[3,0]}})", "ps.layer_sizes"},
      {R"("ps":{"layer_sizes":[4294967295,1]}})", "ps.layer_sizes"},
      {R"("ps":{"layer_sizes":[3],"server_shards":4097}})", "ps.server_shards"},
      {R"("ps":{"layer_sizes":[3],"servers":5000}})", "ps.servers"},
      {R"("ps":{"layer_sizes":[3],"max_staleness":1}})", "ps.max_staleness"},  // < workers - 1
      {R"("ps":{"layer_sizes":[3],"max_staleness":"8589934592"}})", "ps.max_staleness"},
      {R"("ps":{"layer_sizes":[3],"snapshot_interval_ms":86400001}})", "ps.snapshot_interval_ms"},
      {R"("teams":2,"ps":{"layer_sizes":[3]}})", "teams"},
  };
  for (const auto& [tail, field] : bad) {
    auto s = ParseJobConfig(kPs + tail);
    ASSERT_FALSE(s.ok()) << tail;
    EXPECT_NE(s.status().message().find(field), std::string::npos) << s.status();
  }
  // A ps block on a collective job.
  auto c = ParseJobConfig(
      R"({"job_id":"j","world_size":2,"algorithm":"spardl","density":0.01,"ps":{"servers":1}})");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("only for algorithm 'dgs'"), std::string::npos);
}

gradex::v1::JoinRequest Req(const std::string& agent, const std::string& host, bool server) {
  gradex::v1::JoinRequest r;
  r.set_job_id("j");
  r.set_agent_id(agent);
  r.set_host(host);
  r.set_ucx_address("127.0.0.1:1");
  r.set_wire_protocol(gradex::version::kWireProtocol);
  r.set_role(server ? gradex::v1::ROLE_SERVER : gradex::v1::ROLE_WORKER);
  return r;
}

TEST(PsJobConfig, RolesAreValidatedAndServersOnlyJoinPsJobs) {
  gradex::v1::JoinRequest r = Req("a", "h", false);
  r.set_ucx_version("1.13");
  r.set_ucx_transports("all");
  EXPECT_TRUE(ValidateJoin(r).ok());
  r.set_role(static_cast<gradex::v1::Role>(7));
  EXPECT_NE(ValidateJoin(r).message().find("role"), std::string::npos);
  auto s = ParseJobConfig(R"({"job_id":"j","world_size":2,"algorithm":"spardl","density":0.1})");
  ASSERT_TRUE(s.ok());
  Coordinator c(*s, nullptr);
  auto refused = c.Join(Req("srv", "h", true), t0);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("not a parameter-server job"), std::string::npos);
}

TEST(PsCoordinator, ShardsGoToServersAndWorkersKeepSlots) {
  auto s = ParseJobConfig(kPs + R"("ps":{"layer_sizes":[10,20],"max_staleness":2}})");
  ASSERT_TRUE(s.ok()) << s.status();
  JobSettings js = *s;
  js.loss_settle = absl::ZeroDuration();
  Coordinator c(js, nullptr);
  std::map<std::string, uint64_t> id;
  for (const auto& [agent, server] : std::vector<std::pair<std::string, bool>>{
           {"w0", false}, {"w1", false}, {"srv", true}, {"w2", false}}) {
    auto r = c.Join(Req(agent, agent == "w2" ? "h2" : "h1", server), t0);
    ASSERT_TRUE(r.ok()) << r.status();
    id[agent] = r->member_id();
  }
  c.Tick(t0);
  auto p = c.plan();
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(p->members_size(), 4);
  ASSERT_TRUE(p->has_ps());
  EXPECT_EQ(p->ps().shards(), 2u);  // one per host: h1, h2
  int server_rank = -1;
  for (const auto& m : p->members()) {
    if (m.role() == gradex::v1::ROLE_SERVER) server_rank = m.rank();
  }
  ASSERT_GE(server_rank, 0);
  ASSERT_EQ(p->ps().assignments_size(), 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(p->ps().assignments(i).shard(), static_cast<uint32_t>(i));
    EXPECT_EQ(p->ps().assignments(i).rank(), server_rank);
  }
  EXPECT_EQ(p->ps().layer_sizes_size(), 2);
  EXPECT_EQ(p->ps().worker_slots(), 3u);
  EXPECT_EQ(p->ps().max_staleness(), 2u);
  ASSERT_EQ(p->ps().worker_slot_size(), 4);
  std::map<std::string, int> slot;
  for (const auto& m : p->members()) slot[m.agent_id()] = p->ps().worker_slot(m.rank());
  EXPECT_EQ(slot["srv"], -1);
  EXPECT_EQ((std::set<int>{slot["w0"], slot["w1"], slot["w2"]}), (std::set<int>{0, 1, 2}));

  // The server leaves: the survivors' epoch has no shards to serve.
  gradex::v1::LeaveRequest leave;
  leave.set_member_id(id["srv"]);
  ASSERT_TRUE(c.Leave(leave, t0).ok());
  c.Tick(t0 + absl::Milliseconds(10));
  p = c.plan();
  ASSERT_EQ(p->members_size(), 3);
  EXPECT_FALSE(p->has_ps());
  // A restarted server (same agent id) takes both shards again; the workers
  // kept their slots though their ranks may have moved.
  ASSERT_TRUE(c.Join(Req("srv", "h1", true), t0 + absl::Milliseconds(20)).ok());
  c.Tick(t0 + absl::Milliseconds(30));
  p = c.plan();
  ASSERT_EQ(p->members_size(), 4);
  ASSERT_TRUE(p->has_ps());
  EXPECT_EQ(p->ps().shards(), 2u);
  for (const auto& m : p->members()) {
    EXPECT_EQ(p->ps().worker_slot(m.rank()), slot[m.agent_id()]) << m.agent_id();
    if (m.role() == gradex::v1::ROLE_SERVER) {
      EXPECT_EQ(p->ps().assignments(0).rank(), m.rank());
    }
  }
}

}  // namespace
}  // namespace gradex::coordinator
