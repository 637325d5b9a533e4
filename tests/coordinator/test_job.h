// The job and the Join request the coordinator's logic tests start from: one
// place for the settings those tests share, so that each test states only
// what it changes (a lease, an entry timeout, a barrier period).
#ifndef GRADEX_TESTS_COORDINATOR_TEST_JOB_H_
#define GRADEX_TESTS_COORDINATOR_TEST_JOB_H_

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gradex/v1/coordinator.pb.h"
#include "services/coordinator/job_config.h"
#include "services/coordinator/membership/membership.h"
#include "version/version.h"

namespace gradex::coordinator {

// Job "job" of `world` members (all needed), spardl-bsag, barriers every 16
// steps with plans 16 steps ahead.
inline JobSettings TestJob(int world, absl::Duration lease) {
  JobSettings s;
  s.job_id = "job";
  s.world_size = world;
  s.min_world_size = world;
  s.algorithm = "spardl-bsag";
  s.lease = lease;
  s.barrier_period = 16;
  s.plan_lead_steps = 16;
  return s;
}

// The failure tests' job (membership_faults_test, loss_settle_test): a 3 s
// lease and a 4 s entry timeout, short enough to judge on a fake clock.
inline JobSettings FaultsTestJob(int world) {
  JobSettings s = TestJob(world, absl::Seconds(3));
  s.entry_timeout = absl::Seconds(4);
  return s;
}

// A Join of job "job" from `agent` on host "h".
inline gradex::v1::JoinRequest TestJoin(const std::string& agent, int local_rank,
                                        const std::string& ucx_address) {
  gradex::v1::JoinRequest r;
  r.set_job_id("job");
  r.set_agent_id(agent);
  r.set_host("h");
  r.set_local_rank(local_rank);
  r.set_ucx_address(ucx_address);
  r.set_wire_protocol(gradex::version::kWireProtocol);
  return r;
}

// A heartbeat saying the member enters or runs `epoch` (0: says none).
inline void Beat(membership::Membership& m, uint64_t id, uint64_t epoch, absl::Time t) {
  gradex::v1::HeartbeatRequest h;
  h.set_member_id(id);
  h.set_epoch(epoch);
  h.set_next_step(m.Find(id)->next_step);
  ASSERT_TRUE(m.Heartbeat(h, t).ok()) << id;
}

// Members 1..n ("a1".."an", local ranks 1..n) join at t and form epoch 1;
// each heartbeat says it runs it.
inline void StartTestEpoch(membership::Membership& m, absl::Time t, int n) {
  uint64_t rep = 0;
  std::vector<uint64_t> ev;
  for (int i = 1; i <= n; ++i) {
    const std::string agent = "a" + std::to_string(i);
    ASSERT_TRUE(m.Join(TestJoin(agent, i, "addr-" + agent), i, t, &rep).ok());
  }
  ASSERT_TRUE(m.Tick(t, &ev));
  ASSERT_EQ(m.latest().number, 1u);
  for (int i = 1; i <= n; ++i) Beat(m, i, 1, t);
}

}  // namespace gradex::coordinator

#endif  // GRADEX_TESTS_COORDINATOR_TEST_JOB_H_
