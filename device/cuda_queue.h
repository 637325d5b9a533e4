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
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
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
// backend (a test's) still frees into a live pool. Bounded: its buffers and
// scratch may hold at most half the device's memory.
class DevicePool {
 public:
  // On the current device, which is `device`.
  static absl::StatusOr<std::shared_ptr<DevicePool>> Create(int device);
  DevicePool(int device, cudaMemPool_t pool, cudaStream_t release, cudaEvent_t mark, uint64_t limit)
      : device_(device), pool_(pool), release_(release), mark_(mark), limit_(limit) {}
  ~DevicePool();
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  int device() const { return device_; }
  cudaMemPool_t pool() const { return pool_; }

  // A queue's stream, while it lives: a buffer's release follows its work.
  void AddStream(cudaStream_t s);
  void RemoveStream(cudaStream_t s);
  // Frees p (from this pool) once the work every live queue of the device
  // has queued so far is done: stream-ordered on the pool's own stream, no
  // host wait and no device synchronisation.
  void Release(void* p);
  PoolUse Use();
  // Hands what the pool keeps for reuse back to the driver.
  void Trim();

 private:
  const int device_;
  const cudaMemPool_t pool_;
  const cudaStream_t release_;
  const cudaEvent_t mark_;
  const uint64_t limit_;
  absl::Mutex mu_;
  std::vector<cudaStream_t> streams_ ABSL_GUARDED_BY(mu_);
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
  absl::StatusOr<PoolUse> DoPoolUse() override { return pool_->Use(); }
  absl::StatusOr<std::span<std::byte>> DoGrowPinned(Pinned which, size_t bytes) override;
  absl::Status DoUpload(std::span<const float> host, std::span<float> x) override;
  absl::Status DoZero(std::span<float> x) override;
  absl::Status DoSparseToDense(std::span<const uint32_t> idx, std::span<const float> val,
                               std::span<float> x) override;
  absl::Status DoZeroAt(std::span<const uint32_t> idx, std::span<float> x) override;
  absl::Status DoScatterAdd(std::span<const uint32_t> idx, std::span<const float> val,
                            uint32_t index_base, float scale, std::span<float> x) override;
  absl::Status DoUploadStaged(std::span<const float> staged, std::span<float> x) override;
  absl::Status DoStageToHost(std::span<const float> x) override;
  absl::Status DoStageToDevice(std::span<float> x) override;
  absl::Status DoSynchronize() override;
  absl::StatusOr<size_t> DoAccumulate(std::span<const float> grad, std::span<float> residual,
                                      std::span<float> velocity, float momentum) override;
  absl::Status DoAccumulateLater(std::span<const float> grad, std::span<float> residual,
                                 std::span<float> velocity, float momentum) override;
  absl::Status DoSelectTopK(std::span<float> x, size_t k, uint32_t index_base,
                            const kernels::Accumulate* acc, kernels::SparseVec* out,
                            size_t* nonfinite) override;
  absl::Status DoSelectTopKBlocks(std::span<float> x, const std::vector<size_t>& bounds,
                                  const std::vector<size_t>& keeps, const kernels::Accumulate* acc,
                                  std::vector<kernels::SparseVec>* out, size_t* nonfinite) override;
  absl::StatusOr<size_t> DoZeroNonFinite(std::span<float> x, size_t* first) override;
  absl::Status DoZeroNonFiniteLater(std::span<float> x) override;
  size_t DoTakeNonFinite(size_t* first) override;
  absl::StatusOr<double> DoSumOfSquares(std::span<const float> x) override;
  absl::Status DoCopyToHost(std::span<const float> x, std::span<float> host) override;

 private:
  // The host waits for the stream (every wait the wrappers count does).
  absl::Status SyncStream();
  // At least n entries in the device COO buffers, and n counts: from the
  // pool, stream-ordered (no wait).
  absl::Status GrowDevice(size_t n);
  absl::Status GrowCounts(size_t n);
  // idx and val (pinned; val may be empty) into d_idx_ and d_val_, queued.
  absl::Status Stage(std::span<const uint32_t> idx, std::span<const float> val);
  // room entries of d_idx_ / d_val_ into pinned(kDown), queued.
  cudaError_t CopyDown(size_t room);

  const std::shared_ptr<DevicePool> pool_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<kernels::cuda::Workspace> ws_;
  // Counts, from the pool: [0, 1] ZeroNonFinite's count and first, [2, 3] a
  // selection's count and non-finite count, [4] AccumulateLater's count.
  uint64_t* d_scalars_ = nullptr;
  uint64_t* h_scalars_ = nullptr;  // pinned: ZeroNonFiniteLater's copy lands here
  uint64_t* d_counts_ = nullptr;   // blocks' counts, then their non-finite count
  size_t counts_room_ = 0;
  uint32_t* d_idx_ = nullptr;  // from the pool
  float* d_val_ = nullptr;
  size_t d_room_ = 0;
  // Every pinned region made (the ones grown out of too: copies queued from
  // them may still run), freed when the queue ends.
  std::vector<void*> pinned_blocks_;
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
