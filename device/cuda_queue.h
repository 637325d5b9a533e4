// Inside the CUDA backend (cuda_backend.cc, cuda_queue.cc): its events, its
// per-device memory pools and its queues. Built with CUDA only
// (GRADEX_DEVICE_CUDA).
#ifndef GRADEX_DEVICE_CUDA_QUEUE_H_
#define GRADEX_DEVICE_CUDA_QUEUE_H_

#include <cuda_runtime_api.h>

#include <memory>

#include "absl/status/statusor.h"
#include "device/cuda_driver.h"
#include "device/device.h"

namespace gradex::device {

// The events of the backend, a caller's and a queue's alike: destroyed on
// their device.
class CudaEvent : public Event {
 public:
  // null: a point already passed (a caller's stream synchronised instead).
  CudaEvent(cudaEvent_t event, int device) : event(event), device(device) {}
  ~CudaEvent() override;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  const cudaEvent_t event;
  const int device;
};

// A new event (timing off) on the current device, which is `device`.
absl::StatusOr<std::shared_ptr<CudaEvent>> NewEvent(int device);

// One device's stream-ordered memory pool. Shared by the backend, the queues
// of the device and every buffer from it, so that a buffer outliving the
// backend (a test's) still frees into a live pool.
class DevicePool {
 public:
  // On the current device, which is `device`.
  static absl::StatusOr<std::shared_ptr<DevicePool>> Create(int device);
  DevicePool(int device, cudaMemPool_t pool) : device_(device), pool_(pool) {}
  ~DevicePool();
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  int device() const { return device_; }
  cudaMemPool_t pool() const { return pool_; }

 private:
  const int device_;
  const cudaMemPool_t pool_;
};

// A queue on the pool's device, which is current: its own non-blocking
// stream, ordered with other streams by events only.
absl::StatusOr<std::unique_ptr<Queue>> NewCudaQueue(std::shared_ptr<DevicePool> pool);

}  // namespace gradex::device

#endif  // GRADEX_DEVICE_CUDA_QUEUE_H_
