// The call frame every algorithm runs in (SparseAllreduce::Run, written once
// in call_frame.cc) and the argument checks it starts with.
#ifndef GRADEX_COLLECTIVES_CALL_FRAME_H_
#define GRADEX_COLLECTIVES_CALL_FRAME_H_

#include <span>

#include "absl/status/status.h"
#include "collectives/sparse_allreduce.h"

namespace gradex {

absl::Status ValidateCall(const CallContext& ctx, const AllreduceOptions& options,
                          std::span<const float> grad, std::span<float> residual,
                          AllreduceResult* result, CallStats* stats);

}  // namespace gradex

#endif  // GRADEX_COLLECTIVES_CALL_FRAME_H_
