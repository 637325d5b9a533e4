// Argument checks every algorithm runs before touching the transport.
#ifndef GRADEX_COLLECTIVES_CALL_CHECKS_H_
#define GRADEX_COLLECTIVES_CALL_CHECKS_H_

#include <span>

#include "absl/status/status.h"
#include "collectives/sparse_allreduce.h"

namespace gradex {

absl::Status ValidateCall(const CallContext& ctx, const AllreduceOptions& options,
                          std::span<const float> grad, std::span<float> residual,
                          AllreduceResult* result, CallStats* stats);

// Ends a call that failed after communication began: aborts the transport so
// that peers waiting on this rank fail now rather than at their deadline (a
// failed step ends the epoch), and returns `status`.
absl::Status FailCall(const CallContext& ctx, absl::Status status);

// Fills the byte counters and totals of `stats` at the end of a call.
void FinishStats(const CallContext& ctx, const PeerCounters& before, Clock::time_point start,
                 CallStats* stats);

}  // namespace gradex

#endif  // GRADEX_COLLECTIVES_CALL_CHECKS_H_
