// The device path's memory: a device bucket's residual and velocity kept in
// the GPU memory of the bucket's own device (DeviceBuffer), and the
// operations on them (ResidualMemory's, plus the pipeline's own: uploads
// when a bucket moves onto the device, the result's COO written into the
// bucket, factor masking of the velocity). Only O(k) values cross PCIe per
// bucket and step: the selected COO entries down, the result's COO and the
// ledger's discards up; each object counts those bytes.
//
// Built with CUDA only (GRADEX_AGENT_CUDA): otherwise every operation is
// UNIMPLEMENTED, unless DeviceStaging::UseHostCopiesForTesting is set, under
// which "device" memory is host memory and every operation is its host
// kernel (the CPU twins), so that CI runs the whole device path.
//
// The GPU work runs on one stream per object, created as a blocking stream:
// it is ordered after the work the trainer queued on the legacy default
// stream (torch's default), which is where DDP's backward writes the bucket.
#ifndef GRADEX_SERVICES_AGENT_DEVICE_MEMORY_H_
#define GRADEX_SERVICES_AGENT_DEVICE_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/residual_memory.h"

namespace gradex::agent {

// Floats in device memory (or host memory under UseHostCopiesForTesting),
// freed on destruction; zero-filled when allocated.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  std::span<float> span() const { return {data_, size_}; }
  size_t size() const { return size_; }

 private:
  friend class DeviceMemory;
  float* data_ = nullptr;
  size_t size_ = 0;
  int device_ = -1;          // the CUDA device it lives on (-1: none, nothing to free)
  std::vector<float> host_;  // UseHostCopiesForTesting's "device" memory
};

// A bucket slot's state on the device (BucketSlot::device): while a slot
// holds one, these are its residual and velocity and the slot's host vectors
// are stale.
struct DeviceResiduals {
  DeviceBuffer residual;
  DeviceBuffer velocity;
};

class DeviceMemory : public ResidualMemory {
 public:
  DeviceMemory();
  ~DeviceMemory() override;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // True when this build can keep residuals on a device (or tests set
  // UseHostCopiesForTesting).
  static bool Available();

  // Binds the object to the device of `data` (a bucket's device memory),
  // which every later operation and allocation uses; INVALID_ARGUMENT when
  // it is not device memory. Cheap when already bound there.
  absl::Status Bind(std::span<const float> data);
  // n zeros on the bound device.
  absl::Status Allocate(size_t n, DeviceBuffer* out);
  // host -> x and x -> host (as long as x).
  absl::Status Upload(std::span<const float> host, std::span<float> x);
  absl::Status CopyToHost(std::span<const float> x, std::span<float> host) override;
  // x = 0 but at the entries of (idx, val) (host memory, indices unique):
  // kernels::SparseToDense.
  absl::Status SparseToDense(std::span<const uint32_t> idx, std::span<const float> val,
                             std::span<float> x);
  // x[idx[i]] = 0 (host indices).
  absl::Status ZeroAt(std::span<const uint32_t> idx, std::span<float> x);
  // Waits for the object's stream (the bucket's data is final).
  absl::Status Synchronize();

  absl::StatusOr<size_t> Accumulate(std::span<const float> grad, std::span<float> residual,
                                    std::span<float> velocity, float momentum) override;
  absl::Status SelectTopK(std::span<float> x, size_t k, uint32_t index_base,
                          const kernels::Accumulate* acc, kernels::ThresholdReuse* reuse,
                          kernels::SparseVec* out, size_t* nonfinite) override;
  absl::Status ScatterAdd(const kernels::SparseVec& v, uint32_t index_base, float scale,
                          std::span<float> x) override;
  absl::StatusOr<size_t> ZeroNonFinite(std::span<float> x, size_t* first) override;
  absl::StatusOr<double> SumOfSquares(std::span<const float> x) override;

  // Payload bytes copied so far, device to host and host to device (counts
  // and scalars excluded).
  uint64_t to_host_bytes() const { return to_host_bytes_; }
  uint64_t to_device_bytes() const { return to_device_bytes_; }

 private:
  struct Cuda;  // the CUDA backend's state (device_memory_cuda.cc)

  bool fake_ = false;  // UseHostCopiesForTesting when the object was made
  std::unique_ptr<Cuda> cuda_;
  uint64_t to_host_bytes_ = 0;
  uint64_t to_device_bytes_ = 0;
};

}  // namespace gradex::agent

#endif  // GRADEX_SERVICES_AGENT_DEVICE_MEMORY_H_
