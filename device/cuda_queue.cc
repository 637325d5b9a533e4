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
  // Either queue of the device may still use the memory: the pool frees it
  // after their work, in the device's order (no host wait).
  ~CudaBuffer() override {
    if (span_.data() != nullptr) pool_->Release(span_.data());
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
  pool_->AddStream(stream_);
  ws_ = std::make_unique<kernels::cuda::Workspace>(pool_->pool(), stream_);
  void* scalars = nullptr;
  if (cudaError_t e =
          cudaMallocFromPoolAsync(&scalars, 8 * sizeof(uint64_t), pool_->pool(), stream_);
      e != cudaSuccess) {
    return CudaError(e, "device allocation of the counts");
  }
  d_scalars_ = static_cast<uint64_t*>(scalars);
  if (cudaError_t e = cudaMemsetAsync(d_scalars_, 0, 8 * sizeof(uint64_t), stream_);
      e != cudaSuccess) {
    return CudaError(e, "zeroing the counts");
  }
  void* host = nullptr;
  if (cudaError_t e = cudaMallocHost(&host, 8 * sizeof(uint64_t)); e != cudaSuccess) {
    return CudaError(e, "pinned allocation of the counts");
  }
  CountAllocation();
  h_scalars_ = static_cast<uint64_t*>(host);
  return absl::OkStatus();
}

CudaQueue::~CudaQueue() {
  OnDevice on(device());
  if (!on.ok()) {
    (void)ws_.release();  // the runtime is going away (process exit): leave it the memory
    return;
  }
  if (stream_ != nullptr) {
    // Freed in the stream's order, then nothing may still use what goes.
    ws_.reset();
    for (void* p : {static_cast<void*>(d_scalars_), static_cast<void*>(d_counts_),
                    static_cast<void*>(d_idx_), static_cast<void*>(d_val_)}) {
      if (p != nullptr) cudaFreeAsync(p, stream_);
    }
    cudaStreamSynchronize(stream_);
    pool_->RemoveStream(stream_);
  }
  for (void* p : pinned_blocks_) cudaFreeHost(p);
  if (h_scalars_ != nullptr) cudaFreeHost(h_scalars_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::Status CudaQueue::SyncStream() {
  if (cudaError_t e = cudaStreamSynchronize(stream_); e != cudaSuccess) {
    return CudaError(e, "stream synchronisation");
  }
  return absl::OkStatus();
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
  GRADEX_ON_DEVICE();
  // Pageable memory, the caller's again on return.
  if (!x.empty()) {
    if (cudaError_t e =
            cudaMemcpyAsync(x.data(), host.data(), x.size_bytes(), cudaMemcpyHostToDevice, stream_);
        e != cudaSuccess) {
      return CudaError(e, "copy to device");
    }
  }
  return SyncStream();
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

absl::Status CudaQueue::DoScatterAdd(std::span<const uint32_t> idx, std::span<const float> val,
                                     uint32_t index_base, float scale, std::span<float> x) {
  GRADEX_ON_DEVICE();
  if (absl::Status s = Stage(idx, val); !s.ok()) return s;
  if (cudaError_t e = kernels::cuda::ScatterAdd(d_idx_, d_val_, idx.size(), index_base, scale,
                                                x.data(), stream_);
      e != cudaSuccess) {
    return CudaError(e, "ScatterAdd");
  }
  return absl::OkStatus();
}

absl::Status CudaQueue::DoSynchronize() {
  GRADEX_ON_DEVICE();
  return SyncStream();
}

absl::StatusOr<size_t> CudaQueue::DoAccumulate(std::span<const float> grad,
                                               std::span<float> residual, std::span<float> velocity,
                                               float momentum) {
  GRADEX_ON_DEVICE();
  const kernels::Accumulate acc{grad.data(), velocity.empty() ? nullptr : velocity.data(),
                                momentum};
  size_t count = 0;
  // The count's copy drains the stream.
  if (cudaError_t e = kernels::cuda::AccumulateCount(residual.data(), residual.size(), acc,
                                                     d_scalars_, &count, stream_);
      e != cudaSuccess) {
    return CudaError(e, "Accumulate");
  }
  return count;
}

absl::Status CudaQueue::DoAccumulateLater(std::span<const float> grad, std::span<float> residual,
                                          std::span<float> velocity, float momentum) {
  GRADEX_ON_DEVICE();
  const kernels::Accumulate acc{grad.data(), velocity.empty() ? nullptr : velocity.data(),
                                momentum};
  if (cudaError_t e = kernels::cuda::AccumulateCount(residual.data(), residual.size(), acc,
                                                     d_scalars_ + 4, nullptr, stream_);
      e != cudaSuccess) {
    return CudaError(e, "Accumulate");
  }
  return absl::OkStatus();
}

cudaError_t CudaQueue::CopyDown(size_t room) {
  if (room == 0) return cudaSuccess;
  std::byte* down = pinned(Pinned::kDown).data();
  cudaError_t e =
      cudaMemcpyAsync(down, d_idx_, room * sizeof(uint32_t), cudaMemcpyDeviceToHost, stream_);
  if (e != cudaSuccess) return e;
  return cudaMemcpyAsync(down + DownValues(room), d_val_, room * sizeof(float),
                         cudaMemcpyDeviceToHost, stream_);
}

absl::Status CudaQueue::DoSelectTopK(std::span<float> x, size_t k, uint32_t index_base,
                                     const kernels::Accumulate* acc, kernels::SparseVec* out,
                                     size_t* nonfinite) {
  GRADEX_ON_DEVICE();
  const size_t n = x.size();
  *nonfinite = 0;
  if (n == 0) return SyncStream();  // a wait as counted: the stream drains
  const size_t room = std::min(k, n);
  if (absl::Status s = GrowDevice(std::max<size_t>(room, 1)); !s.ok()) return s;
  // The selection count and the non-finite count side by side (the kernel
  // writes d_nonfinite = d_count + 1), so one copy reads both.
  uint64_t* d_counts = d_scalars_ + 2;
  if (cudaError_t e = kernels::cuda::SelectTopKStep(
          x.data(), n, k, index_base, acc, /*reuse=*/nullptr, /*zero_selected=*/true, d_idx_,
          d_val_, d_counts, /*h_count=*/nullptr, ws_.get(), stream_, /*d_nonfinite=*/d_counts + 1);
      e != cudaSuccess) {
    return CudaError(e, "SelectTopK");
  }
  // The room's entries go down first (all of them: the count is not known
  // yet, and it is min(k, selectable), almost always the room); the counts'
  // copy into pageable memory returns once the stream has done everything
  // before it, so the host waits once.
  cudaError_t e = CopyDown(room);
  uint64_t counts[2] = {0, 0};
  if (e == cudaSuccess) {
    e = cudaMemcpyAsync(counts, d_counts, sizeof(counts), cudaMemcpyDeviceToHost, stream_);
  }
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess) return CudaError(e, "selection copy to host");
  if (counts[0] > room) {
    return absl::InternalError(
        absl::StrCat("CUDA queue SelectTopK: ", counts[0], " entries selected of room ", room));
  }
  *nonfinite = static_cast<size_t>(counts[1]);
  const std::byte* down = pinned(Pinned::kDown).data();
  const auto* idx = reinterpret_cast<const uint32_t*>(down);
  const auto* val = reinterpret_cast<const float*>(down + DownValues(room));
  out->idx.insert(out->idx.end(), idx, idx + counts[0]);
  out->val.insert(out->val.end(), val, val + counts[0]);
  return absl::OkStatus();
}

absl::Status CudaQueue::DoSelectTopKBlocks(std::span<float> x, const std::vector<size_t>& bounds,
                                           const std::vector<size_t>& keeps,
                                           const kernels::Accumulate* acc,
                                           std::vector<kernels::SparseVec>* out,
                                           size_t* nonfinite) {
  GRADEX_ON_DEVICE();
  const size_t blocks = out->size();
  *nonfinite = 0;
  std::vector<size_t> offsets(blocks + 1, 0);
  for (size_t b = 0; b < blocks; ++b) {
    const size_t len = bounds[b + 1] > bounds[b] ? bounds[b + 1] - bounds[b] : 0;
    offsets[b + 1] = offsets[b] + std::min(keeps[b], len);
  }
  const size_t room = offsets[blocks];
  if (blocks == 0) return SyncStream();
  if (absl::Status s = GrowDevice(std::max<size_t>(room, 1)); !s.ok()) return s;
  if (absl::Status s = GrowCounts(blocks + 1); !s.ok()) return s;
  if (cudaError_t e = kernels::cuda::BlockTopKStep(
          x.data(), bounds.data(), keeps.data(), blocks, acc, /*zero_selected=*/true, d_idx_,
          d_val_, offsets.data(), d_counts_, d_counts_ + blocks, ws_.get(), stream_);
      e != cudaSuccess) {
    return CudaError(e, "BlockTopKStep");
  }
  // Every block's room and every count in one wait.
  cudaError_t e = CopyDown(room);
  std::vector<uint64_t> counts(blocks + 1, 0);
  if (e == cudaSuccess) {
    e = cudaMemcpyAsync(counts.data(), d_counts_, counts.size() * sizeof(uint64_t),
                        cudaMemcpyDeviceToHost, stream_);
  }
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess) return CudaError(e, "block selection copy to host");
  const std::byte* down = pinned(Pinned::kDown).data();
  const auto* idx = reinterpret_cast<const uint32_t*>(down);
  const auto* val = reinterpret_cast<const float*>(down + DownValues(room));
  for (size_t b = 0; b < blocks; ++b) {
    const size_t have = offsets[b + 1] - offsets[b];
    if (counts[b] > have) {
      return absl::InternalError(absl::StrCat("CUDA queue block ", b, ": ", counts[b],
                                              " entries selected of room ", have));
    }
    kernels::SparseVec& o = (*out)[b];
    o.idx.assign(idx + offsets[b], idx + offsets[b] + counts[b]);
    o.val.assign(val + offsets[b], val + offsets[b] + counts[b]);
  }
  *nonfinite = static_cast<size_t>(counts[blocks]);
  return absl::OkStatus();
}

absl::StatusOr<size_t> CudaQueue::DoZeroNonFinite(std::span<float> x, size_t* first) {
  GRADEX_ON_DEVICE();
  size_t count = 0, at = 0;
  // The counts' copy drains the stream.
  if (cudaError_t e =
          kernels::cuda::ZeroNonFinite(x.data(), x.size(), d_scalars_, &count, &at, stream_);
      e != cudaSuccess) {
    return CudaError(e, "ZeroNonFinite");
  }
  if (first != nullptr) *first = at;
  return count;
}

absl::Status CudaQueue::DoZeroNonFiniteLater(std::span<float> x) {
  GRADEX_ON_DEVICE();
  cudaError_t e =
      kernels::cuda::ZeroNonFinite(x.data(), x.size(), d_scalars_, nullptr, nullptr, stream_);
  // Into pinned memory: the copy is queued, the host reads it after a wait.
  if (e == cudaSuccess) {
    e = cudaMemcpyAsync(h_scalars_, d_scalars_, 2 * sizeof(uint64_t), cudaMemcpyDeviceToHost,
                        stream_);
  }
  if (e != cudaSuccess) return CudaError(e, "ZeroNonFinite");
  return absl::OkStatus();
}

size_t CudaQueue::DoTakeNonFinite(size_t* first) {
  *first = static_cast<size_t>(h_scalars_[1]);
  return static_cast<size_t>(h_scalars_[0]);
}

absl::StatusOr<double> CudaQueue::DoSumOfSquares(std::span<const float> x) {
  GRADEX_ON_DEVICE();
  double sum = 0.0;
  // The value's copy drains the stream.
  if (cudaError_t e =
          kernels::cuda::SumOfSquares(x.data(), x.size(), nullptr, &sum, ws_.get(), stream_);
      e != cudaSuccess) {
    return CudaError(e, "SumOfSquares");
  }
  return sum;
}

absl::Status CudaQueue::DoCopyToHost(std::span<const float> x, std::span<float> host) {
  GRADEX_ON_DEVICE();
  if (!x.empty()) {
    if (cudaError_t e =
            cudaMemcpyAsync(host.data(), x.data(), x.size_bytes(), cudaMemcpyDeviceToHost, stream_);
        e != cudaSuccess) {
      return CudaError(e, "copy to host");
    }
  }
  return SyncStream();
}

absl::StatusOr<std::unique_ptr<Queue>> NewCudaQueue(std::shared_ptr<DevicePool> pool) {
  auto queue = std::make_unique<CudaQueue>(std::move(pool));
  // A failed Init leaves what it made to the destructor.
  if (absl::Status s = queue->Init(); !s.ok()) return s;
  return std::unique_ptr<Queue>(std::move(queue));
}

}  // namespace gradex::device
