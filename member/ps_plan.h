// A parameter-server job's part of the plan (gradex.v1.PsPlan) as the
// agent's PsPlan, every field bounded by the plan itself before use
// (docs/design.md, Trust): shard ranks among the plan's SERVER members,
// worker slots unique and below worker_slots, one per WORKER member, the
// model's sizes within what DgsLayout takes.
#ifndef GRADEX_MEMBER_PS_PLAN_H_
#define GRADEX_MEMBER_PS_PLAN_H_

#include <vector>

#include "absl/status/statusor.h"
#include "catalog/catalog.h"
#include "gradex/v1/coordinator.pb.h"
#include "member/control_plane.h"

namespace gradex::member {

inline constexpr uint32_t kMaxPsShards = catalog::kMaxParameterServerShards;
inline constexpr size_t kMaxPsLayers = 65536;
inline constexpr uint32_t kMaxPsWorkerSlots = 65536;

// INVALID_ARGUMENT naming the field when anything is out of range.
absl::StatusOr<PsPlan> ToPsPlan(const gradex::v1::PsPlan& m,
                                const std::vector<PlanMember>& members);

}  // namespace gradex::member

#endif  // GRADEX_MEMBER_PS_PLAN_H_
