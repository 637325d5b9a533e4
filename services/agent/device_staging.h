// Memory::kDevice buckets: the gradient is copied from the GPU to a pinned
// host buffer, exchanged there, and the result copied back (the selection
// itself runs on the host for now). Built with CUDA (GRADEX_CUDA, see
// cmake/cuda.cmake) only; otherwise every call is UNIMPLEMENTED.
#ifndef GRADEX_SERVICES_AGENT_DEVICE_STAGING_H_
#define GRADEX_SERVICES_AGENT_DEVICE_STAGING_H_

#include <cstddef>
#include <span>

#include "absl/status/statusor.h"

namespace gradex::agent {

class DeviceStaging {
 public:
  DeviceStaging() = default;
  DeviceStaging(const DeviceStaging&) = delete;
  DeviceStaging& operator=(const DeviceStaging&) = delete;
  ~DeviceStaging();

  // True when this build can stage device memory.
  static bool Available();
  // Copies `device` (a CUDA device pointer) into the pinned buffer and
  // returns it; INVALID_ARGUMENT when the pointer is not device memory.
  // Works on the pointer's device (asked of the driver, which opens no
  // context, then cudaSetDevice) and keeps the pinned buffer on it: a rank
  // opens a context on its memory's GPU only. Every call (and the
  // destructor) leaves the calling thread's current context as it was.
  absl::StatusOr<std::span<float>> ToHost(std::span<const float> device);
  // Copies the pinned buffer's first device.size() values back.
  absl::Status ToDevice(std::span<float> device);

 private:
  float* pinned_ = nullptr;
  size_t capacity_ = 0;
  int device_ = -1;  // the device pinned_ was allocated on (-1: none chosen)
};

}  // namespace gradex::agent

#endif  // GRADEX_SERVICES_AGENT_DEVICE_STAGING_H_
