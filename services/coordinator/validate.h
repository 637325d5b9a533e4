// Checks requests against the API's limits before anything reads them. Each
// returns INVALID_ARGUMENT naming the field, or OK.
#ifndef GRADEX_SERVICES_COORDINATOR_VALIDATE_H_
#define GRADEX_SERVICES_COORDINATOR_VALIDATE_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "gradex/v1/coordinator.pb.h"

namespace gradex::coordinator {

// 1..128 bytes of [A-Za-z0-9._-].
bool IsValidJobId(absl::string_view id);

absl::Status ValidateJoin(const gradex::v1::JoinRequest& r);
absl::Status ValidateHeartbeat(const gradex::v1::HeartbeatRequest& r);
absl::Status ValidateLeave(const gradex::v1::LeaveRequest& r);
absl::Status ValidateWatch(const gradex::v1::WatchPlanRequest& r);
absl::Status ValidateReport(const gradex::v1::StepReport& r);

}  // namespace gradex::coordinator

#endif  // GRADEX_SERVICES_COORDINATOR_VALIDATE_H_
