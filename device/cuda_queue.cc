// The CUDA queue's operations (the staging through pinned buffers is in
// cuda_staging.cc).
#include "device/cuda_queue.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/sparse_cuda.h"

namespace gradex::device {

namespace {

class CudaBuffer : public Buffer {
 public:
  CudaBuffer(std::shared_ptr<DevicePool> pool, float* p, size_t n) : pool_(std::move(pool)) {
    span_ = std::span<float>(p, n);
  }
  // Either queue of the device may still use the memory, so the whole device
  // is waited for: rare (a slot dropped by a rebuild, a restore or the
  // pipeline's end), never in a steady step.
  ~CudaBuffer() override {
    if (span_.data() == nullptr) return;
    OnDevice on(pool_->device());
    if (!on.ok()) return;  // the runtime is going away (process exit): it frees the pool
    cudaDeviceSynchronize();
    cudaFree(span_.data());  // no implicit wait for pool memory: hence the one above
  }

 private:
  std::shared_ptr<DevicePool> pool_;
};

}  // namespace

absl::Status CudaQueue::Init() {
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
      e != cudaSuccess) {
    stream_ = nullptr;
    return CudaError(e, "stream creation");
  }
  if (cudaError_t e = cudaEventCreateWithFlags(&staged_, cudaEventDisableTiming);
      e != cudaSuccess) {
    staged_ = nullptr;
    return CudaError(e, "event creation");
  }
  ws_ = std::make_unique<kernels::cuda::Workspace>();
  if (cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&d_scalars_), 4 * sizeof(uint64_t));
      e != cudaSuccess) {
    d_scalars_ = nullptr;
    return CudaError(e, "device allocation of the counts");
  }
  return absl::OkStatus();
}

CudaQueue::~CudaQueue() {
  OnDevice on(device());
  if (!on.ok()) {
    (void)ws_.release();  // the runtime is going away (process exit): leave it the memory
    return;
  }
  // Nothing may still use what is freed here.
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  ws_.reset();  // frees on the current device
  cudaFree(d_scalars_);
  cudaFree(d_idx_);
  cudaFree(d_val_);
  if (h_idx_ != nullptr) cudaFreeHost(h_idx_);
  if (h_val_ != nullptr) cudaFreeHost(h_val_);
  if (bucket_ != nullptr) cudaFreeHost(bucket_);
  if (staged_ != nullptr) cudaEventDestroy(staged_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::Status CudaQueue::Wait(const Event& e) {
  const auto* event = dynamic_cast<const CudaEvent*>(&e);
  if (event == nullptr) return absl::InvalidArgumentError("CUDA queue: not a CUDA event");
  if (event->event == nullptr) return absl::OkStatus();
  GRADEX_ON_DEVICE();
  if (cudaError_t err = cudaStreamWaitEvent(stream_, event->event, 0); err != cudaSuccess) {
    return CudaError(err, "queue wait for an event");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Event>> CudaQueue::Record() {
  GRADEX_ON_DEVICE();
  absl::StatusOr<std::shared_ptr<CudaEvent>> event = NewEvent(device());
  if (!event.ok()) return event.status();
  if (cudaError_t e = cudaEventRecord((*event)->event, stream_); e != cudaSuccess) {
    return CudaError(e, "event record on the queue");
  }
  return std::shared_ptr<Event>(*std::move(event));
}

absl::StatusOr<std::unique_ptr<Buffer>> CudaQueue::DoAllocate(size_t n) {
  if (n == 0) return std::make_unique<CudaBuffer>(pool_, nullptr, 0);
  GRADEX_ON_DEVICE();
  void* p = nullptr;
  if (cudaError_t e = cudaMallocFromPoolAsync(&p, n * sizeof(float), pool_->pool(), stream_);
      e != cudaSuccess) {
    return CudaError(e, absl::StrCat("device allocation of ", n, " floats").c_str());
  }
  if (cudaError_t e = cudaMemsetAsync(p, 0, n * sizeof(float), stream_); e != cudaSuccess) {
    cudaFreeAsync(p, stream_);
    return CudaError(e, "zeroing a device allocation");
  }
  return std::make_unique<CudaBuffer>(pool_, static_cast<float*>(p), n);
}

absl::Status CudaQueue::DoUpload(std::span<const float> host, std::span<float> x) {
  if (x.empty()) return absl::OkStatus();
  GRADEX_ON_DEVICE();
  // Pageable memory, the caller's again on return: the wrapper counts the wait.
  cudaError_t e =
      cudaMemcpyAsync(x.data(), host.data(), x.size_bytes(), cudaMemcpyHostToDevice, stream_);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess) return CudaError(e, "copy to device");
  return absl::OkStatus();
}

absl::Status CudaQueue::DoZero(std::span<float> x) {
  if (x.empty()) return absl::OkStatus();
  GRADEX_ON_DEVICE();
  if (cudaError_t e = cudaMemsetAsync(x.data(), 0, x.size_bytes(), stream_); e != cudaSuccess) {
    return CudaError(e, "zeroing");
  }
  return absl::OkStatus();
}

absl::Status CudaQueue::DoSparseToDense(std::span<const uint32_t> idx, std::span<const float> val,
                                        std::span<float> x) {
  GRADEX_ON_DEVICE();
  if (absl::Status s = Stage(idx, val); !s.ok()) return s;
  if (cudaError_t e =
          kernels::cuda::SparseToDense(d_idx_, d_val_, idx.size(), 0, x.data(), x.size(), stream_);
      e != cudaSuccess) {
    return CudaError(e, "SparseToDense");
  }
  return absl::OkStatus();
}

absl::Status CudaQueue::DoZeroAt(std::span<const uint32_t> idx, std::span<float> x) {
  GRADEX_ON_DEVICE();
  if (absl::Status s = Stage(idx, {}); !s.ok()) return s;
  if (cudaError_t e = kernels::cuda::ZeroAt(d_idx_, idx.size(), 0, x.data(), stream_);
      e != cudaSuccess) {
    return CudaError(e, "ZeroAt");
  }
  return absl::OkStatus();
}

absl::Status CudaQueue::DoScatterAdd(const kernels::SparseVec& v, uint32_t index_base, float scale,
                                     std::span<float> x) {
  GRADEX_ON_DEVICE();
  if (absl::Status s = Stage(v.idx, v.val); !s.ok()) return s;
  if (cudaError_t e =
          kernels::cuda::ScatterAdd(d_idx_, d_val_, v.nnz(), index_base, scale, x.data(), stream_);
      e != cudaSuccess) {
    return CudaError(e, "ScatterAdd");
  }
  return absl::OkStatus();
}

absl::Status CudaQueue::DoSynchronize() {
  GRADEX_ON_DEVICE();
  if (cudaError_t e = cudaStreamSynchronize(stream_); e != cudaSuccess) {
    return CudaError(e, "stream synchronisation");
  }
  staged_pending_ = false;
  return absl::OkStatus();
}

absl::StatusOr<size_t> CudaQueue::DoAccumulate(std::span<const float> grad,
                                               std::span<float> residual, std::span<float> velocity,
                                               float momentum) {
  GRADEX_ON_DEVICE();
  const kernels::Accumulate acc{grad.data(), velocity.empty() ? nullptr : velocity.data(),
                                momentum};
  size_t count = 0;
  if (cudaError_t e = kernels::cuda::AccumulateCount(residual.data(), residual.size(), acc,
                                                     d_scalars_, &count, stream_);
      e != cudaSuccess) {
    return CudaError(e, "Accumulate");
  }
  staged_pending_ = false;  // the count's copy drained the stream
  return count;
}

absl::Status CudaQueue::DoSelectTopK(std::span<float> x, size_t k, uint32_t index_base,
                                     const kernels::Accumulate* acc, kernels::ThresholdReuse* reuse,
                                     kernels::SparseVec* out, size_t* nonfinite) {
  GRADEX_ON_DEVICE();
  const size_t n = x.size();
  *nonfinite = 0;
  if (n == 0) return absl::OkStatus();
  const size_t room = std::min(k, n);
  if (absl::Status s = GrowDevice(std::max<size_t>(room, 1)); !s.ok()) return s;
  if (absl::Status s = GrowPinned(std::max<size_t>(room, 1)); !s.ok()) return s;
  // The selection count and the non-finite count side by side (the kernel
  // writes d_nonfinite = d_count + 1), so one copy reads both.
  uint64_t* d_counts = d_scalars_ + 2;
  if (cudaError_t e = kernels::cuda::SelectTopKStep(
          x.data(), n, k, index_base, acc, reuse, /*zero_selected=*/true, d_idx_, d_val_, d_counts,
          /*h_count=*/nullptr, ws_.get(), stream_, /*d_nonfinite=*/d_counts + 1);
      e != cudaSuccess) {
    return CudaError(e, "SelectTopK");
  }
  // The room's entries go down into the pinned buffers first (all of them:
  // the count is not known yet, and it is min(k, selectable), almost always
  // the room), stream-ordered after any earlier copy out of them; the
  // counts' copy into pageable memory returns once the stream has done
  // everything before it, so the host waits once.
  cudaError_t e = cudaSuccess;
  if (room > 0) {
    e = cudaMemcpyAsync(h_idx_, d_idx_, room * sizeof(uint32_t), cudaMemcpyDeviceToHost, stream_);
    if (e == cudaSuccess) {
      e = cudaMemcpyAsync(h_val_, d_val_, room * sizeof(float), cudaMemcpyDeviceToHost, stream_);
    }
  }
  uint64_t counts[2] = {0, 0};
  if (e == cudaSuccess) {
    e = cudaMemcpyAsync(counts, d_counts, sizeof(counts), cudaMemcpyDeviceToHost, stream_);
  }
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess) return CudaError(e, "selection copy to host");
  staged_pending_ = false;
  if (counts[0] > room) {
    return absl::InternalError(
        absl::StrCat("CUDA queue SelectTopK: ", counts[0], " entries selected of room ", room));
  }
  *nonfinite = static_cast<size_t>(counts[1]);
  out->idx.insert(out->idx.end(), h_idx_, h_idx_ + counts[0]);
  out->val.insert(out->val.end(), h_val_, h_val_ + counts[0]);
  return absl::OkStatus();
}

absl::StatusOr<size_t> CudaQueue::DoZeroNonFinite(std::span<float> x, size_t* first) {
  GRADEX_ON_DEVICE();
  size_t count = 0, at = 0;
  if (cudaError_t e =
          kernels::cuda::ZeroNonFinite(x.data(), x.size(), d_scalars_, &count, &at, stream_);
      e != cudaSuccess) {
    return CudaError(e, "ZeroNonFinite");
  }
  staged_pending_ = false;
  if (first != nullptr) *first = at;
  return count;
}

absl::StatusOr<double> CudaQueue::DoSumOfSquares(std::span<const float> x) {
  GRADEX_ON_DEVICE();
  double sum = 0.0;
  if (cudaError_t e =
          kernels::cuda::SumOfSquares(x.data(), x.size(), nullptr, &sum, ws_.get(), stream_);
      e != cudaSuccess) {
    return CudaError(e, "SumOfSquares");
  }
  staged_pending_ = false;
  return sum;
}

absl::Status CudaQueue::DoCopyToHost(std::span<const float> x, std::span<float> host) {
  if (x.empty()) return absl::OkStatus();
  GRADEX_ON_DEVICE();
  cudaError_t e =
      cudaMemcpyAsync(host.data(), x.data(), x.size_bytes(), cudaMemcpyDeviceToHost, stream_);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess) return CudaError(e, "copy to host");
  staged_pending_ = false;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Queue>> NewCudaQueue(std::shared_ptr<DevicePool> pool) {
  auto queue = std::make_unique<CudaQueue>(std::move(pool));
  // A failed Init leaves what it made to the destructor.
  if (absl::Status s = queue->Init(); !s.ok()) return s;
  return std::unique_ptr<Queue>(std::move(queue));
}

}  // namespace gradex::device
