// Test helper: joins `world` members to a Coordinator, the way the fixtures
// of the coordinator's logic tests start a job.
#ifndef GRADEX_TESTS_COORDINATOR_JOIN_ALL_H_
#define GRADEX_TESTS_COORDINATOR_JOIN_ALL_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "services/coordinator/coordinator.h"
#include "version/version.h"

namespace gradex::coordinator {

// Members "a<i>" on host "h<i>", local rank i, in order i = 0..world-1, all
// at `now`. Returns their member ids; a refused join is a test failure (and
// a shorter vector).
inline std::vector<uint64_t> JoinAll(Coordinator& c, int world, absl::Time now) {
  std::vector<uint64_t> ids;
  for (int i = 0; i < world; ++i) {
    gradex::v1::JoinRequest r;
    r.set_job_id(c.settings().job_id);
    r.set_agent_id("a" + std::to_string(i));
    r.set_host("h" + std::to_string(i));
    r.set_local_rank(i);
    r.set_ucx_address("addr");
    r.set_wire_protocol(gradex::version::kWireProtocol);
    auto resp = c.Join(r, now);
    if (!resp.ok()) {
      ADD_FAILURE() << "join " << i << ": " << resp.status();
      break;
    }
    ids.push_back(resp->member_id());
  }
  return ids;
}

}  // namespace gradex::coordinator

#endif  // GRADEX_TESTS_COORDINATOR_JOIN_ALL_H_
