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

// Fills the byte counters and totals of `stats` at the end of a call.
void FinishStats(const CallContext& ctx, const PeerCounters& before, Clock::time_point start,
                 CallStats* stats);

}  // namespace gradex

#endif  // GRADEX_COLLECTIVES_CALL_CHECKS_H_
