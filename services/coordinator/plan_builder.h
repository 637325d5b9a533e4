// Builds the published Plan from the epoch, the members' records and the
// controllers' current values.
#ifndef GRADEX_SERVICES_COORDINATOR_PLAN_BUILDER_H_
#define GRADEX_SERVICES_COORDINATOR_PLAN_BUILDER_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "catalog/node_layout.h"
#include "gradex/v1/coordinator.pb.h"
#include "services/coordinator/controllers/controllers.h"
#include "services/coordinator/controllers/server_shards.h"
#include "services/coordinator/job_config.h"
#include "services/coordinator/membership/membership.h"

namespace gradex::coordinator {

// COVAP's filter interval I, the catalog parameter the CCR profiler sets.
inline constexpr char kCovapInterval[] = "covap_interval";

// What all ranks must agree on, beyond membership; changes at barriers.
struct AgreedParams {
  controllers::TeamChoice teams;
  int covap_interval = 3;
  double covap_ccr = 0;
  std::map<uint32_t, controllers::AgreedRegions> regions;  // by bucket
  // Per bucket index: its own algorithm ("" = the plan's), from the bucket
  // controller.
  std::vector<std::string> bucket_algorithms;
  // Parameter-server jobs: the epoch's shard assignment (shards == 0: none,
  // e.g. no server member yet: the plan then carries no PsPlan).
  controllers::ShardAssignment ps;
};

// The epoch's node layout (catalog/node_layout.h): each member's node is its
// host, over the members still known, in rank order (as the plan lists them).
catalog::NodeLayout EpochLayout(const membership::Membership& m, const membership::Epoch& epoch);

gradex::v1::Plan BuildPlan(
    const JobSettings& s, const membership::Membership& m, const membership::Epoch& epoch,
    uint64_t version, uint64_t effective_step, const AgreedParams& agreed,
    const std::vector<std::pair<std::pair<uint32_t, int>, uint64_t>>& kprime);

}  // namespace gradex::coordinator

#endif  // GRADEX_SERVICES_COORDINATOR_PLAN_BUILDER_H_
