// Memory::kDevice buckets: the gradient is copied from the GPU to a pinned
// host buffer, exchanged there, and the result copied back (the selection
// itself runs on the host for now: "whole-bucket staging"). Built with CUDA
// (GRADEX_CUDA, see cmake/cuda.cmake) only; otherwise every call is
// UNIMPLEMENTED. Each object counts the bytes it copied each way, so that
// the PCIe traffic a bucket costs is measured, not inferred.
#ifndef GRADEX_SERVICES_AGENT_DEVICE_STAGING_H_
#define GRADEX_SERVICES_AGENT_DEVICE_STAGING_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace gradex::agent {

// How a bucket's data reached the exchange: host memory as given, or a
// device bucket copied whole to the host and back.
// kDeviceSelection: the bucket's residual and velocity live on its GPU, the
// local part runs there and only the selected entries and the result's COO
// cross PCIe (device_memory.h).
enum class DevicePath { kHost, kWholeBucketStaging, kDeviceSelection };
// "host", "whole-bucket staging", "device selection" (stats() and the log).
const char* DevicePathName(DevicePath path);

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

  // Bytes copied so far, device to host (ToHost) and host to device
  // (ToDevice); only copies that succeeded count. Each object is used by
  // one thread at a time (the pipeline hands it over under its lock).
  uint64_t to_host_bytes() const { return to_host_bytes_; }
  uint64_t to_device_bytes() const { return to_device_bytes_; }

  // Tests on machines without a GPU: while set (process-wide), "device"
  // pointers are host memory and the copies are plain memcpy through an
  // ordinary buffer, so the pipeline's device path, its counters and what
  // the client reports run everywhere. Never set outside tests.
  static void UseHostCopiesForTesting(bool on);
  static bool HostCopiesForTesting();

 private:
  absl::StatusOr<std::span<float>> CudaToHost(std::span<const float> device);
  absl::Status CudaToDevice(std::span<float> device);

  std::vector<float> fake_;  // UseHostCopiesForTesting's staging buffer
  bool fake_used_ = false;   // the last ToHost went through fake_
  uint64_t to_host_bytes_ = 0;
  uint64_t to_device_bytes_ = 0;
  float* pinned_ = nullptr;
  size_t capacity_ = 0;
  int device_ = -1;  // the device pinned_ was allocated on (-1: none chosen)
};

}  // namespace gradex::agent

#endif  // GRADEX_SERVICES_AGENT_DEVICE_STAGING_H_
