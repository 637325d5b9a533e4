// Placeholder of DeviceMemory's CUDA backend until device_memory_cuda.cc
// lands: every operation is UNIMPLEMENTED.
#include "absl/status/status.h"
#include "services/agent/device_memory_cuda.h"

namespace gradex::agent {
namespace {
absl::Status None() { return absl::UnimplementedError("device memory: no CUDA backend"); }
}  // namespace

struct DeviceMemory::Cuda::State {};
DeviceMemory::Cuda::Cuda() = default;
DeviceMemory::Cuda::~Cuda() = default;
absl::Status DeviceMemory::Cuda::Bind(const void*) { return None(); }
absl::Status DeviceMemory::Cuda::Allocate(size_t, float**, int*) { return None(); }
absl::Status DeviceMemory::Cuda::Upload(std::span<const float>, std::span<float>) { return None(); }
absl::Status DeviceMemory::Cuda::CopyToHost(std::span<const float>, std::span<float>) {
  return None();
}
absl::Status DeviceMemory::Cuda::SparseToDense(std::span<const uint32_t>, std::span<const float>,
                                               std::span<float>) {
  return None();
}
absl::Status DeviceMemory::Cuda::ZeroAt(std::span<const uint32_t>, std::span<float>) {
  return None();
}
absl::Status DeviceMemory::Cuda::Synchronize() { return None(); }
absl::StatusOr<size_t> DeviceMemory::Cuda::Accumulate(std::span<const float>, std::span<float>,
                                                      std::span<float>, float) {
  return None();
}
absl::Status DeviceMemory::Cuda::SelectTopK(std::span<float>, size_t, uint32_t,
                                            kernels::ThresholdReuse*, kernels::SparseVec*) {
  return None();
}
absl::Status DeviceMemory::Cuda::ScatterAdd(const kernels::SparseVec&, uint32_t, float,
                                            std::span<float>) {
  return None();
}
absl::StatusOr<size_t> DeviceMemory::Cuda::ZeroNonFinite(std::span<float>, size_t*) {
  return None();
}
absl::StatusOr<double> DeviceMemory::Cuda::SumOfSquares(std::span<const float>) { return None(); }
void FreeDeviceFloats(float*, int) {}

}  // namespace gradex::agent
