// No silent override: the options the job's plan decides (option_table.h's
// plan_decided: algorithm, density, teams, params) that a rank asked for
// with other values than the plan it joins. Create refuses them naming each
// option, both values and where the plan's came from; with
// allow_plan_override the rank warns once per option and counts it.
#ifndef GRADEX_SERVICES_CLIENT_PLAN_OVERRIDE_H_
#define GRADEX_SERVICES_CLIENT_PLAN_OVERRIDE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "member/control_plane.h"
#include "prometheus/registry.h"
#include "services/client/client.h"

namespace gradex::client {

struct PlanOverride {
  std::string option;  // "density", or "params.NAME"
  std::string asked;   // this rank's value
  std::string where;   // how it was asked ("keyword density", "GRADEX_...", "C++ field")
  std::string plan;    // the plan's value, and why when it is not the job config's own
};

// The asked plan-decided options whose values differ from `plan`'s. An
// asked team count of 0 leaves the count to the coordinator: never a
// difference. An asked parameter the job config lacks is compared with the
// catalog's default for the plan's algorithm (or any algorithm that has it).
std::vector<PlanOverride> FindPlanOverrides(const ClientOptions& asked,
                                            const member::JobPlanConfig& plan);

// Where the plan's values come from, in words: the coordinator given by
// address (and how: GRADEX_COORDINATOR or the option), or rank 0's embedded
// coordinator, built from rank 0's options.
std::string PlanSource(const ClientOptions& o, const std::string& address);

// INVALID_ARGUMENT naming every override, both values and the source, and
// the ways out.
absl::Status PlanOverrideError(const std::vector<PlanOverride>& overrides,
                               const std::string& source);
// One warning line per override (stderr).
std::string PlanOverrideWarning(const PlanOverride& o, const std::string& source);

// The check Client::Create runs once joined: nothing when the plan config is
// unknown (a coordinator that predates it) or nothing differs; else the
// error, or with allow_plan_override the warnings on stderr and
// gradex_client_plan_overrides_total{option} on `registry`.
absl::Status CheckPlanOverrides(const ClientOptions& o,
                                const std::optional<member::JobPlanConfig>& plan,
                                const std::string& address, prometheus::Registry& registry);

}  // namespace gradex::client

#endif  // GRADEX_SERVICES_CLIENT_PLAN_OVERRIDE_H_
