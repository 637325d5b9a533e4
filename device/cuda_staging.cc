// The CUDA queue's staging: its device COO and count buffers (from the pool,
// stream-ordered), its pinned regions (grown by the floor's policy in
// queue.cc, kept until the queue ends), COO entries going up and whole
// buckets both ways.
#include <algorithm>
#include <span>

#include "device/cuda_queue.h"

namespace gradex::device {

absl::Status CudaQueue::GrowDevice(size_t n) {
  if (n <= d_room_) return absl::OkStatus();
  // Freed in stream order: the work queued before still reads the old ones.
  if (d_idx_ != nullptr) cudaFreeAsync(d_idx_, stream_);
  if (d_val_ != nullptr) cudaFreeAsync(d_val_, stream_);
  d_idx_ = nullptr;
  d_val_ = nullptr;
  // Half as much again, at least doubling: changing block sizes and result
  // sizes stop growing it within the first steps.
  const size_t want = std::max(n + n / 2, 2 * d_room_);
  d_room_ = 0;
  void* idx = nullptr;
  void* val = nullptr;
  cudaError_t e = cudaMallocFromPoolAsync(&idx, want * sizeof(uint32_t), pool_->pool(), stream_);
  if (e == cudaSuccess) {
    d_idx_ = static_cast<uint32_t*>(idx);
    e = cudaMallocFromPoolAsync(&val, want * sizeof(float), pool_->pool(), stream_);
  }
  if (e != cudaSuccess) return CudaError(e, "device COO allocation");
  d_val_ = static_cast<float*>(val);
  d_room_ = want;
  return absl::OkStatus();
}

absl::Status CudaQueue::GrowCounts(size_t n) {
  if (n <= counts_room_) return absl::OkStatus();
  if (d_counts_ != nullptr) cudaFreeAsync(d_counts_, stream_);
  d_counts_ = nullptr;
  const size_t want = std::max(n + n / 2, 2 * counts_room_);
  counts_room_ = 0;
  void* p = nullptr;
  if (cudaError_t e = cudaMallocFromPoolAsync(&p, want * sizeof(uint64_t), pool_->pool(), stream_);
      e != cudaSuccess) {
    return CudaError(e, "device allocation of the block counts");
  }
  d_counts_ = static_cast<uint64_t*>(p);
  counts_room_ = want;
  return absl::OkStatus();
}

absl::StatusOr<std::span<std::byte>> CudaQueue::DoGrowPinned(Pinned, size_t bytes) {
  GRADEX_ON_DEVICE();
  void* p = nullptr;
  if (cudaError_t e = cudaMallocHost(&p, bytes); e != cudaSuccess) {
    return CudaError(e, "pinned allocation");
  }
  // The region grown out of stays: copies queued from it may still run, and
  // cudaFreeHost would synchronise the device.
  pinned_blocks_.push_back(p);
  return std::span<std::byte>(static_cast<std::byte*>(p), bytes);
}

absl::Status CudaQueue::Stage(std::span<const uint32_t> idx, std::span<const float> val) {
  const size_t nnz = idx.size();
  if (nnz == 0) return absl::OkStatus();
  if (absl::Status s = GrowDevice(nnz); !s.ok()) return s;
  // From the pinned ring, which the host does not write again before the
  // queue's next wait: the copies need no event of their own.
  cudaError_t e =
      cudaMemcpyAsync(d_idx_, idx.data(), idx.size_bytes(), cudaMemcpyHostToDevice, stream_);
  if (e == cudaSuccess && !val.empty()) {
    e = cudaMemcpyAsync(d_val_, val.data(), val.size_bytes(), cudaMemcpyHostToDevice, stream_);
  }
  if (e != cudaSuccess) return CudaError(e, "COO copy to device");
  return absl::OkStatus();
}

absl::Status CudaQueue::DoUploadStaged(std::span<const float> staged, std::span<float> x) {
  GRADEX_ON_DEVICE();
  if (cudaError_t e = cudaMemcpyAsync(x.data(), staged.data(), staged.size_bytes(),
                                      cudaMemcpyHostToDevice, stream_);
      e != cudaSuccess) {
    return CudaError(e, "staged copy to device");
  }
  return absl::OkStatus();
}

absl::Status CudaQueue::DoStageToHost(std::span<const float> x) {
  GRADEX_ON_DEVICE();
  // Stream-ordered after the last StageToDevice's copy out of the buffer.
  if (!x.empty()) {
    if (cudaError_t e = cudaMemcpyAsync(pinned(Pinned::kBucket).data(), x.data(), x.size_bytes(),
                                        cudaMemcpyDeviceToHost, stream_);
        e != cudaSuccess) {
      return CudaError(e, "copy to host");
    }
  }
  return SyncStream();
}

absl::Status CudaQueue::DoStageToDevice(std::span<float> x) {
  if (x.empty()) return absl::OkStatus();
  GRADEX_ON_DEVICE();
  if (cudaError_t e = cudaMemcpyAsync(x.data(), pinned(Pinned::kBucket).data(), x.size_bytes(),
                                      cudaMemcpyHostToDevice, stream_);
      e != cudaSuccess) {
    return CudaError(e, "copy to device");
  }
  return absl::OkStatus();
}

}  // namespace gradex::device
