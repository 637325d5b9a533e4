// The call frame every algorithm runs in (SparseAllreduce::Run, written once
// in call_frame.cc) and the argument checks it starts with.
#ifndef GRADEX_COLLECTIVES_CALL_FRAME_H_
#define GRADEX_COLLECTIVES_CALL_FRAME_H_

#include <span>

#include "absl/status/status.h"
#include "collectives/sparse_allreduce.h"

namespace gradex::collectives {

absl::Status ValidateCall(const CallContext& ctx, const AllreduceOptions& options,
                          std::span<const float> grad, std::span<float> residual,
                          AllreduceResult* result, CallStats* stats);

// The conservation rule, written once: this rank's whole gradient joins its
// residual (residual += grad), for a call's accumulation and for a bucket
// that is kept instead of exchanged (a failed step, a closing client).
// Returns how many residual entries are NaN or infinite afterwards.
size_t AccumulateIntoResidual(std::span<const float> grad, std::span<float> residual);
// The same with DGC's momentum correction first: velocity = velocity * m +
// grad, then residual += velocity, each operation rounded to float32 (no
// fused multiply-add: the bits torch's u.mul_(m).add_(g) holds), as the
// fused selection kernels do it. An empty velocity: the plain form.
size_t AccumulateIntoResidual(std::span<const float> grad, std::span<float> residual,
                              std::span<float> velocity, float momentum);

}  // namespace gradex::collectives

#endif  // GRADEX_COLLECTIVES_CALL_FRAME_H_
