// DeviceMemory's CUDA backend (device_memory_cuda.cc), internal to
// device_memory.cc: the same operations over device pointers, on the
// object's own stream, with the kernels of kernels/cuda. Without
// GRADEX_AGENT_CUDA every call is UNIMPLEMENTED. Byte counting is the
// caller's (device_memory.cc).
#ifndef GRADEX_SERVICES_AGENT_DEVICE_MEMORY_CUDA_H_
#define GRADEX_SERVICES_AGENT_DEVICE_MEMORY_CUDA_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/sparse.h"
#include "kernels/topk_step.h"
#include "services/agent/device_memory.h"

namespace gradex::agent {

struct DeviceMemory::Cuda {
  Cuda();
  ~Cuda();
  // The pointer's device (asked of the driver: no context is made), then
  // cudaSetDevice on the calling thread; the stream and scratch are made on
  // the first bind and remade when the device changes. Every call leaves the
  // calling thread's current context as it found it.
  absl::Status Bind(const void* data);
  absl::Status Allocate(size_t n, float** out, int* device);
  absl::Status Upload(std::span<const float> host, std::span<float> x);
  absl::Status CopyToHost(std::span<const float> x, std::span<float> host);
  absl::Status SparseToDense(std::span<const uint32_t> idx, std::span<const float> val,
                             std::span<float> x);
  absl::Status ZeroAt(std::span<const uint32_t> idx, std::span<float> x);
  absl::Status Synchronize();
  absl::StatusOr<size_t> Accumulate(std::span<const float> grad, std::span<float> residual,
                                    std::span<float> velocity, float momentum);
  // Appends the selection to *out (host memory).
  absl::Status SelectTopK(std::span<float> x, size_t k, uint32_t index_base,
                          const kernels::Accumulate* acc, kernels::ThresholdReuse* reuse,
                          kernels::SparseVec* out, size_t* nonfinite);
  absl::Status ScatterAdd(const kernels::SparseVec& v, uint32_t index_base, float scale,
                          std::span<float> x);
  absl::StatusOr<size_t> ZeroNonFinite(std::span<float> x, size_t* first);
  absl::StatusOr<double> SumOfSquares(std::span<const float> x);

  struct State;  // stream, workspace, pinned and device COO buffers
  std::unique_ptr<State> state;
};

// Frees a DeviceBuffer's memory on its device (the calling thread's current
// context is left as it was).
void FreeDeviceFloats(float* p, int device);

}  // namespace gradex::agent

#endif  // GRADEX_SERVICES_AGENT_DEVICE_MEMORY_CUDA_H_
