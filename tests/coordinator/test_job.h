// The job and the Join request the coordinator's logic tests start from: one
// place for the settings those tests share, so that each test states only
// what it changes (a lease, an entry timeout, a barrier period).
#ifndef GRADEX_TESTS_COORDINATOR_TEST_JOB_H_
#define GRADEX_TESTS_COORDINATOR_TEST_JOB_H_

#include <string>

#include "gradex/v1/coordinator.pb.h"
#include "services/coordinator/job_config.h"

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

// A Join of job "job" from `agent` on host "h".
inline gradex::v1::JoinRequest TestJoin(const std::string& agent, int local_rank,
                                        const std::string& ucx_address) {
  gradex::v1::JoinRequest r;
  r.set_job_id("job");
  r.set_agent_id(agent);
  r.set_host("h");
  r.set_local_rank(local_rank);
  r.set_ucx_address(ucx_address);
  return r;
}

}  // namespace gradex::coordinator

#endif  // GRADEX_TESTS_COORDINATOR_TEST_JOB_H_
