// Inside the CUDA backend (cuda_backend.cc, cuda_queue.cc, cuda_staging.cc):
// its events, its per-device memory pools and its queues. Built with CUDA
// only (GRADEX_DEVICE_CUDA).
#ifndef GRADEX_DEVICE_CUDA_QUEUE_H_
#define GRADEX_DEVICE_CUDA_QUEUE_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device/cuda_driver.h"
#include "device/device.h"
#include "kernels/cuda/sparse_cuda.h"

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

// The CUDA queue: its operations in cuda_queue.cc, its staging through pinned
// buffers (COO and whole buckets) in cuda_staging.cc.
class CudaQueue : public Queue {
 public:
  explicit CudaQueue(std::shared_ptr<DevicePool> pool)
      : Queue(pool->device()), pool_(std::move(pool)) {}
  ~CudaQueue() override;
  // On the queue's device.
  absl::Status Init();

  absl::Status Wait(const Event& e) override;
  absl::StatusOr<std::shared_ptr<Event>> Record() override;

 protected:
  absl::StatusOr<std::unique_ptr<Buffer>> DoAllocate(size_t n) override;
  absl::Status DoUpload(std::span<const float> host, std::span<float> x) override;
  absl::Status DoZero(std::span<float> x) override;
  absl::Status DoSparseToDense(std::span<const uint32_t> idx, std::span<const float> val,
                               std::span<float> x) override;
  absl::Status DoZeroAt(std::span<const uint32_t> idx, std::span<float> x) override;
  absl::StatusOr<std::span<float>> DoStageToHost(std::span<const float> x) override;
  absl::Status DoStageToDevice(std::span<float> x) override;
  absl::Status DoSynchronize() override;
  absl::StatusOr<size_t> DoAccumulate(std::span<const float> grad, std::span<float> residual,
                                      std::span<float> velocity, float momentum) override;
  absl::Status DoSelectTopK(std::span<float> x, size_t k, uint32_t index_base,
                            const kernels::Accumulate* acc, kernels::ThresholdReuse* reuse,
                            kernels::SparseVec* out, size_t* nonfinite) override;
  absl::Status DoScatterAdd(const kernels::SparseVec& v, uint32_t index_base, float scale,
                            std::span<float> x) override;
  absl::StatusOr<size_t> DoZeroNonFinite(std::span<float> x, size_t* first) override;
  absl::StatusOr<double> DoSumOfSquares(std::span<const float> x) override;
  absl::Status DoCopyToHost(std::span<const float> x, std::span<float> host) override;

 private:
  // The host waits for the stream (a wait of the backend's own: counted).
  absl::Status Drain();
  // At least n entries in the device COO buffers (stream-ordered, no wait),
  // and in the pinned ones (grown only after the stream is drained).
  absl::Status GrowDevice(size_t n);
  absl::Status GrowPinned(size_t n);
  // idx and val (may be empty) through the pinned buffers into d_idx_ and
  // d_val_, on the stream; the host returns before the copies are done.
  absl::Status Stage(std::span<const uint32_t> idx, std::span<const float> val);

  const std::shared_ptr<DevicePool> pool_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<kernels::cuda::Workspace> ws_;
  // Counts: ZeroNonFinite's count and first (Accumulate's count in the
  // first), then SelectTopK's selection and non-finite counts.
  uint64_t* d_scalars_ = nullptr;
  uint32_t* d_idx_ = nullptr;  // from the pool
  float* d_val_ = nullptr;
  size_t d_room_ = 0;
  uint32_t* h_idx_ = nullptr;  // pinned
  float* h_val_ = nullptr;
  size_t h_room_ = 0;
  // Recorded after the last copy out of h_idx_ / h_val_: the host writes
  // them again only once the stream has read them.
  cudaEvent_t staged_ = nullptr;
  bool staged_pending_ = false;
  float* bucket_ = nullptr;  // pinned, whole-bucket staging
  size_t bucket_room_ = 0;
};

// In CudaQueue's operations: the queue's device is current for the rest of
// the function, or the function returns why not.
#define GRADEX_ON_DEVICE()       \
  OnDevice on_device_(device()); \
  if (!on_device_.ok()) return on_device_.status()

// A queue on the pool's device, which is current: its own non-blocking
// stream, ordered with other streams by events only.
absl::StatusOr<std::unique_ptr<Queue>> NewCudaQueue(std::shared_ptr<DevicePool> pool);

}  // namespace gradex::device

#endif  // GRADEX_DEVICE_CUDA_QUEUE_H_
