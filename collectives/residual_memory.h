// Where a call's gradient, residual and velocity live when they are not host
// memory: the few operations the call frame, its ledger and LocalTopK apply
// to them there. The agent's bucket pipeline keeps a device bucket's residual
// and velocity on the GPU and hands the call such an object (a device::Queue,
// device/device.h), so that only the k selected entries and the result's COO
// cross PCIe. A null ResidualMemory* everywhere means host memory, worked on
// in place by the fused kernels as before.
//
// Only algorithms whose exchange reads the residual for its size alone may
// run on it (SparseAllreduce::DeviceResidual()): everything else they take
// out of the residual or owe back goes through the ledger as COO.
//
// Every operation gives the bits its host kernel gives (kernels/topk_step.h,
// kernels/sparse.h, the call frame's accumulation). One object is used by one
// thread at a time.
#ifndef GRADEX_COLLECTIVES_RESIDUAL_MEMORY_H_
#define GRADEX_COLLECTIVES_RESIDUAL_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/sparse.h"
#include "kernels/topk_step.h"

namespace gradex::collectives {

class ResidualMemory {
 public:
  virtual ~ResidualMemory() = default;

  // velocity = velocity * momentum + grad (velocity may be empty: grad as
  // is), then residual += velocity (or grad), each operation rounded to
  // float32 as AccumulateIntoResidual does. Returns how many residual entries
  // are NaN or infinite afterwards.
  virtual absl::StatusOr<size_t> Accumulate(std::span<const float> grad, std::span<float> residual,
                                            std::span<float> velocity, float momentum) = 0;
  // The top-k of x exactly as kernels::SelectTopKStep selects it, zeroed in
  // x and appended to *out (host memory) with index_base added to the
  // indices. `acc` (may be null; its pointers live where x does) is added
  // into x in the selection's first pass, as the host kernel fuses it;
  // *nonfinite (may be null) gets the count of NaN and infinite entries of x
  // after that accumulation. `reuse` may be null.
  virtual absl::Status SelectTopK(std::span<float> x, size_t k, uint32_t index_base,
                                  const kernels::Accumulate* acc, kernels::ThresholdReuse* reuse,
                                  kernels::SparseVec* out, size_t* nonfinite) = 0;
  // kernels::BlockTopKStep's blocks in one go: block b = x[bounds[b],
  // bounds[b+1]) (the blocks cover x) keeps keeps[b] entries into (*out)[b]
  // (resized to the block count), `acc` (indexed like x; may be null)
  // accumulated inside the blocks, *nonfinite (may be null) the sum over the
  // blocks. `reuse` (may be null) is resized to one state per block. One
  // host round trip for all blocks, however many there are.
  virtual absl::Status SelectTopKBlocks(std::span<float> x, const std::vector<size_t>& bounds,
                                        const std::vector<size_t>& keeps,
                                        const kernels::Accumulate* acc,
                                        std::vector<kernels::ThresholdReuse>* reuse,
                                        std::vector<kernels::SparseVec>* out,
                                        size_t* nonfinite) = 0;
  // x[idx - index_base] += scale * val for every entry of `v` (host memory),
  // as kernels::ScatterAdd.
  virtual absl::Status ScatterAdd(const kernels::SparseVec& v, uint32_t index_base, float scale,
                                  std::span<float> x) = 0;
  // Sets the NaN and infinite entries of x to 0 and returns their count;
  // *first gets the first one's index (x.size() when there is none).
  virtual absl::StatusOr<size_t> ZeroNonFinite(std::span<float> x, size_t* first) = 0;
  // The sum of x's squares, accumulated in double (a norm for statistics:
  // the order of the sum may differ from the host's).
  virtual absl::StatusOr<double> SumOfSquares(std::span<const float> x) = 0;
  // x's values into `host` (as long as x): error paths and checkpoints.
  virtual absl::Status CopyToHost(std::span<const float> x, std::span<float> host) = 0;
};

}  // namespace gradex::collectives

#endif  // GRADEX_COLLECTIVES_RESIDUAL_MEMORY_H_
