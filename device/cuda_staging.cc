// The CUDA queue's staging through pinned buffers: COO entries (Stage, with
// the device and pinned buffers it grows) and whole buckets (StageToHost,
// StageToDevice).
#include <cstring>
#include <span>

#include "device/cuda_queue.h"

namespace gradex::device {

absl::Status CudaQueue::Drain() {
  CountWait();
  if (cudaError_t e = cudaStreamSynchronize(stream_); e != cudaSuccess) {
    return CudaError(e, "stream synchronisation");
  }
  staged_pending_ = false;
  return absl::OkStatus();
}

absl::Status CudaQueue::GrowDevice(size_t n) {
  if (n <= d_room_) return absl::OkStatus();
  // Freed in stream order: the work queued before still reads the old ones.
  if (d_idx_ != nullptr) cudaFreeAsync(d_idx_, stream_);
  if (d_val_ != nullptr) cudaFreeAsync(d_val_, stream_);
  d_idx_ = nullptr;
  d_val_ = nullptr;
  d_room_ = 0;
  const size_t want = n + n / 2;  // a slowly growing k does not reallocate often
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

absl::Status CudaQueue::GrowPinned(size_t n) {
  if (n <= h_room_) return absl::OkStatus();
  // The stream may still copy from or into the old buffers.
  if (h_idx_ != nullptr) {
    if (absl::Status s = Drain(); !s.ok()) return s;
  }
  if (h_idx_ != nullptr) cudaFreeHost(h_idx_);
  if (h_val_ != nullptr) cudaFreeHost(h_val_);
  h_idx_ = nullptr;
  h_val_ = nullptr;
  h_room_ = 0;
  const size_t want = n + n / 2;
  void* idx = nullptr;
  void* val = nullptr;
  cudaError_t e = cudaMallocHost(&idx, want * sizeof(uint32_t));
  if (e == cudaSuccess) {
    h_idx_ = static_cast<uint32_t*>(idx);
    e = cudaMallocHost(&val, want * sizeof(float));
  }
  if (e != cudaSuccess) return CudaError(e, "pinned COO allocation");
  h_val_ = static_cast<float*>(val);
  h_room_ = want;
  return absl::OkStatus();
}

absl::Status CudaQueue::Stage(std::span<const uint32_t> idx, std::span<const float> val) {
  const size_t nnz = idx.size();
  if (nnz == 0) return absl::OkStatus();
  if (absl::Status s = GrowDevice(nnz); !s.ok()) return s;
  if (absl::Status s = GrowPinned(nnz); !s.ok()) return s;
  if (staged_pending_) {
    CountWait();
    if (cudaError_t e = cudaEventSynchronize(staged_); e != cudaSuccess) {
      return CudaError(e, "waiting for the last COO copy");
    }
    staged_pending_ = false;
  }
  std::memcpy(h_idx_, idx.data(), idx.size_bytes());
  cudaError_t e =
      cudaMemcpyAsync(d_idx_, h_idx_, idx.size_bytes(), cudaMemcpyHostToDevice, stream_);
  if (e == cudaSuccess && !val.empty()) {
    std::memcpy(h_val_, val.data(), val.size_bytes());
    e = cudaMemcpyAsync(d_val_, h_val_, val.size_bytes(), cudaMemcpyHostToDevice, stream_);
  }
  if (e != cudaSuccess) return CudaError(e, "COO copy to device");
  if (cudaEventRecord(staged_, stream_) == cudaSuccess) {
    staged_pending_ = true;
    return absl::OkStatus();
  }
  cudaGetLastError();
  return Drain();  // without the event, the next Stage would not know when to write
}

absl::StatusOr<std::span<float>> CudaQueue::DoStageToHost(std::span<const float> x) {
  GRADEX_ON_DEVICE();
  if (x.size() > bucket_room_) {
    // The stream may still copy out of the old buffer (the last StageToDevice).
    if (bucket_ != nullptr) {
      if (absl::Status s = Drain(); !s.ok()) return s;
    }
    if (bucket_ != nullptr) cudaFreeHost(bucket_);
    bucket_ = nullptr;
    bucket_room_ = 0;
    void* p = nullptr;
    if (cudaError_t e = cudaMallocHost(&p, x.size_bytes()); e != cudaSuccess) {
      return CudaError(e, "pinned allocation");
    }
    bucket_ = static_cast<float*>(p);
    bucket_room_ = x.size();
  }
  if (x.empty()) return std::span<float>(bucket_, 0);
  // Stream-ordered after the last StageToDevice's copy out of the buffer.
  cudaError_t e =
      cudaMemcpyAsync(bucket_, x.data(), x.size_bytes(), cudaMemcpyDeviceToHost, stream_);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess) return CudaError(e, "copy to host");
  return std::span<float>(bucket_, x.size());
}

absl::Status CudaQueue::DoStageToDevice(std::span<float> x) {
  if (x.empty()) return absl::OkStatus();
  GRADEX_ON_DEVICE();
  if (cudaError_t e =
          cudaMemcpyAsync(x.data(), bucket_, x.size_bytes(), cudaMemcpyHostToDevice, stream_);
      e != cudaSuccess) {
    return CudaError(e, "copy to device");
  }
  return absl::OkStatus();
}

}  // namespace gradex::device
