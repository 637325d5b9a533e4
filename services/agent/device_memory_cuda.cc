#include "services/agent/device_memory_cuda.h"

#include "absl/strings/str_cat.h"

#if GRADEX_AGENT_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "kernels/cuda/sparse_cuda.h"
#include "services/agent/cuda_driver.h"
#endif

namespace gradex::agent {

#if GRADEX_AGENT_CUDA

// Everything here lives on `device` and is freed there (Release). The COO
// buffers grow and never shrink; the pinned ones bounce the O(k) entries
// that cross PCIe, and are written by the host only once the stream has
// finished with them (Stage, SelectTopK).
struct DeviceMemory::Cuda::State {
  int device = -1;
  cudaStream_t stream = nullptr;
  std::unique_ptr<kernels::cuda::Workspace> ws;
  uint64_t* d_scalars = nullptr;  // counts: ZeroNonFinite's count and first, then SelectTopK's
                                  // selection and non-finite counts
  uint32_t* d_idx = nullptr;
  float* d_val = nullptr;
  size_t d_room = 0;  // entries of d_idx and d_val
  uint32_t* h_idx = nullptr;
  float* h_val = nullptr;
  size_t h_room = 0;  // entries of h_idx and h_val (pinned)

  // Frees everything; `device` must be current.
  void Release();
  // Makes `device` current (the caller keeps the thread's context).
  absl::Status Enter() const;
  // At least n entries in the device COO buffers, and in the pinned ones.
  absl::Status GrowDevice(size_t n);
  absl::Status GrowPinned(size_t n);
  // Copies idx (checked: idx[i] - index_base < bound) and val (may be
  // empty) through the pinned buffers into d_idx / d_val, on the stream.
  absl::Status Stage(std::span<const uint32_t> idx, std::span<const float> val, uint32_t index_base,
                     size_t bound);
  // Waits for the stream: every operation ends with its work done, so that
  // the pipeline's two objects (two streams, not ordered with each other)
  // may take turns on a slot's buffers, and so that an error is reported by
  // the call that caused it.
  absl::Status Finish(const char* what);
};

void DeviceMemory::Cuda::State::Release() {
  // Nothing may still use the memory freed here.
  if (stream != nullptr) cudaStreamSynchronize(stream);
  ws.reset();  // its destructor frees on the current device
  if (d_scalars != nullptr) cudaFree(d_scalars);
  if (d_idx != nullptr) cudaFree(d_idx);
  if (d_val != nullptr) cudaFree(d_val);
  if (h_idx != nullptr) cudaFreeHost(h_idx);
  if (h_val != nullptr) cudaFreeHost(h_val);
  if (stream != nullptr) cudaStreamDestroy(stream);
  d_scalars = nullptr;
  d_idx = nullptr;
  d_val = nullptr;
  h_idx = nullptr;
  h_val = nullptr;
  stream = nullptr;
  d_room = 0;
  h_room = 0;
  device = -1;
}

absl::Status DeviceMemory::Cuda::State::Enter() const {
  if (device < 0 || stream == nullptr) {
    return absl::FailedPreconditionError(
        "DeviceMemory: not bound to a device (call Bind with the bucket's device memory first)");
  }
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return CudaError(e, "selecting the bound device");
  }
  return absl::OkStatus();
}

absl::Status DeviceMemory::Cuda::State::GrowDevice(size_t n) {
  if (n <= d_room) return absl::OkStatus();
  // Work on the stream may still read or write the old buffers.
  if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) {
    return CudaError(e, "stream synchronisation");
  }
  if (d_idx != nullptr) cudaFree(d_idx);
  if (d_val != nullptr) cudaFree(d_val);
  d_idx = nullptr;
  d_val = nullptr;
  d_room = 0;
  const size_t want = n + n / 2;  // a slowly growing k does not reallocate often
  if (cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&d_idx), want * sizeof(uint32_t));
      e != cudaSuccess) {
    d_idx = nullptr;
    return CudaError(e, "device COO allocation");
  }
  if (cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&d_val), want * sizeof(float));
      e != cudaSuccess) {
    d_val = nullptr;
    return CudaError(e, "device COO allocation");
  }
  d_room = want;
  return absl::OkStatus();
}

absl::Status DeviceMemory::Cuda::State::GrowPinned(size_t n) {
  if (n <= h_room) return absl::OkStatus();
  // The stream may still copy from or into the old buffers.
  if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) {
    return CudaError(e, "stream synchronisation");
  }
  if (h_idx != nullptr) cudaFreeHost(h_idx);
  if (h_val != nullptr) cudaFreeHost(h_val);
  h_idx = nullptr;
  h_val = nullptr;
  h_room = 0;
  const size_t want = n + n / 2;
  if (cudaError_t e = cudaMallocHost(reinterpret_cast<void**>(&h_idx), want * sizeof(uint32_t));
      e != cudaSuccess) {
    h_idx = nullptr;
    return CudaError(e, "pinned COO allocation");
  }
  if (cudaError_t e = cudaMallocHost(reinterpret_cast<void**>(&h_val), want * sizeof(float));
      e != cudaSuccess) {
    h_val = nullptr;
    return CudaError(e, "pinned COO allocation");
  }
  h_room = want;
  return absl::OkStatus();
}

absl::Status DeviceMemory::Cuda::State::Stage(std::span<const uint32_t> idx,
                                              std::span<const float> val, uint32_t index_base,
                                              size_t bound) {
  const size_t nnz = idx.size();
  if (!val.empty() && val.size() != nnz) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceMemory: ", nnz, " indices but ", val.size(), " values"));
  }
  // An index outside x would write past the device buffer: check on the
  // host, where it costs one pass over O(k) entries.
  for (size_t i = 0; i < nnz; ++i) {
    if (idx[i] < index_base || idx[i] - index_base >= bound) {
      return absl::InvalidArgumentError(absl::StrCat("DeviceMemory: index ", idx[i],
                                                     " is outside [", index_base, ", ",
                                                     uint64_t{index_base} + bound, ")"));
    }
  }
  if (nnz == 0) return absl::OkStatus();
  if (absl::Status s = GrowDevice(nnz); !s.ok()) return s;
  if (absl::Status s = GrowPinned(nnz); !s.ok()) return s;
  // The pinned buffers may still be the source or target of earlier copies.
  if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) {
    return CudaError(e, "stream synchronisation");
  }
  std::memcpy(h_idx, idx.data(), nnz * sizeof(uint32_t));
  if (cudaError_t e =
          cudaMemcpyAsync(d_idx, h_idx, nnz * sizeof(uint32_t), cudaMemcpyHostToDevice, stream);
      e != cudaSuccess) {
    return CudaError(e, "COO copy to device");
  }
  if (!val.empty()) {
    std::memcpy(h_val, val.data(), nnz * sizeof(float));
    if (cudaError_t e =
            cudaMemcpyAsync(d_val, h_val, nnz * sizeof(float), cudaMemcpyHostToDevice, stream);
        e != cudaSuccess) {
      return CudaError(e, "COO copy to device");
    }
  }
  return absl::OkStatus();
}

absl::Status DeviceMemory::Cuda::State::Finish(const char* what) {
  if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) return CudaError(e, what);
  return absl::OkStatus();
}

namespace {

// Opens the driver (Bind has opened it before any other call) and keeps the
// calling thread's current context for the scope.
class Scope {
 public:
  Scope() : keep_(OpenDriver(&why_)) {}

 private:
  std::string why_;
  KeepCurrentContext keep_;
};

}  // namespace

DeviceMemory::Cuda::Cuda() : state(std::make_unique<State>()) {}

DeviceMemory::Cuda::~Cuda() {
  if (state == nullptr || state->device < 0) return;
  Scope scope;
  // On its own device: a thread without one would make device 0's context.
  if (cudaSetDevice(state->device) == cudaSuccess) {
    state->Release();
  } else {
    // The runtime is going away (process exit): leave the scratch to it
    // rather than free it on whatever device is current.
    (void)state->ws.release();
  }
}

absl::Status DeviceMemory::Cuda::Bind(const void* data) {
  std::string why;
  const Driver* driver = OpenDriver(&why);
  if (driver == nullptr) return absl::InvalidArgumentError(absl::StrCat("Memory::kDevice: ", why));
  KeepCurrentContext keep(driver);
  absl::StatusOr<PointerInfo> info = QueryPointer(*driver, data);
  if (!info.ok()) return info.status();
  if (!info->device) {
    return absl::InvalidArgumentError("Memory::kDevice: the pointer is not device memory");
  }
  if (info->ordinal < 0) {
    return absl::InvalidArgumentError(
        "Memory::kDevice: the CUDA driver names no device for the pointer (managed memory tied "
        "to no device cannot hold device residuals)");
  }
  if (state->device == info->ordinal && state->stream != nullptr) return absl::OkStatus();
  if (state->device >= 0) {
    // The stream and buffers belong to the old device: free them there.
    if (cudaError_t e = cudaSetDevice(state->device); e != cudaSuccess) {
      return CudaError(e, "selecting the previously bound device");
    }
    state->Release();
  }
  // Work on the memory's device, never this thread's default (device 0): a
  // rank of a multi-GPU node must open no context on its neighbours' GPUs.
  if (cudaError_t e = cudaSetDevice(info->ordinal); e != cudaSuccess) {
    return CudaError(e, "selecting the memory's device");
  }
  state->device = info->ordinal;
  // Blocking (not cudaStreamNonBlocking): ordered after the legacy default
  // stream, where the trainer's backward wrote the bucket.
  cudaStream_t stream = nullptr;
  if (cudaError_t e = cudaStreamCreate(&stream); e != cudaSuccess) {
    state->Release();
    return CudaError(e, "stream creation");
  }
  state->stream = stream;
  state->ws = std::make_unique<kernels::cuda::Workspace>();
  if (cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&state->d_scalars), 4 * sizeof(uint64_t));
      e != cudaSuccess) {
    state->d_scalars = nullptr;
    state->Release();
    return CudaError(e, "device allocation of the counts");
  }
  return absl::OkStatus();
}

absl::Status DeviceMemory::Cuda::Allocate(size_t n, float** out, int* device) {
  Scope scope;
  if (absl::Status s = state->Enter(); !s.ok()) return s;
  *out = nullptr;
  *device = state->device;
  if (n == 0) return absl::OkStatus();
  void* p = nullptr;
  if (cudaError_t e = cudaMalloc(&p, n * sizeof(float)); e != cudaSuccess) {
    return CudaError(e, absl::StrCat("device allocation of ", n, " floats").c_str());
  }
  cudaError_t e = cudaMemsetAsync(p, 0, n * sizeof(float), state->stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(state->stream);
  if (e != cudaSuccess) {
    cudaFree(p);
    return CudaError(e, "zeroing a device allocation");
  }
  *out = static_cast<float*>(p);
  return absl::OkStatus();
}

absl::Status DeviceMemory::Cuda::Upload(std::span<const float> host, std::span<float> x) {
  if (host.size() < x.size()) {
    return absl::InvalidArgumentError(absl::StrCat("DeviceMemory::Upload: ", host.size(),
                                                   " host values for ", x.size(), " entries"));
  }
  Scope scope;
  if (absl::Status s = state->Enter(); !s.ok()) return s;
  if (x.empty()) return absl::OkStatus();
  cudaError_t e =
      cudaMemcpyAsync(x.data(), host.data(), x.size_bytes(), cudaMemcpyHostToDevice, state->stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(state->stream);
  if (e != cudaSuccess) return CudaError(e, "copy to device");
  return absl::OkStatus();
}

absl::Status DeviceMemory::Cuda::CopyToHost(std::span<const float> x, std::span<float> host) {
  if (host.size() < x.size()) {
    return absl::InvalidArgumentError(absl::StrCat("DeviceMemory::CopyToHost: room for ",
                                                   host.size(), " of ", x.size(), " entries"));
  }
  Scope scope;
  if (absl::Status s = state->Enter(); !s.ok()) return s;
  if (x.empty()) return absl::OkStatus();
  cudaError_t e =
      cudaMemcpyAsync(host.data(), x.data(), x.size_bytes(), cudaMemcpyDeviceToHost, state->stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(state->stream);
  if (e != cudaSuccess) return CudaError(e, "copy to host");
  return absl::OkStatus();
}

absl::Status DeviceMemory::Cuda::SparseToDense(std::span<const uint32_t> idx,
                                               std::span<const float> val, std::span<float> x) {
  if (idx.size() != val.size()) {
    return absl::InvalidArgumentError(absl::StrCat("DeviceMemory::SparseToDense: ", idx.size(),
                                                   " indices but ", val.size(), " values"));
  }
  Scope scope;
  if (absl::Status s = state->Enter(); !s.ok()) return s;
  if (absl::Status s = state->Stage(idx, val, 0, x.size()); !s.ok()) return s;
  if (cudaError_t e = kernels::cuda::SparseToDense(state->d_idx, state->d_val, idx.size(), 0,
                                                   x.data(), x.size(), state->stream);
      e != cudaSuccess) {
    return CudaError(e, "SparseToDense");
  }
  return state->Finish("SparseToDense");
}

absl::Status DeviceMemory::Cuda::ZeroAt(std::span<const uint32_t> idx, std::span<float> x) {
  Scope scope;
  if (absl::Status s = state->Enter(); !s.ok()) return s;
  if (absl::Status s = state->Stage(idx, {}, 0, x.size()); !s.ok()) return s;
  if (cudaError_t e = kernels::cuda::ZeroAt(state->d_idx, idx.size(), 0, x.data(), state->stream);
      e != cudaSuccess) {
    return CudaError(e, "ZeroAt");
  }
  return state->Finish("ZeroAt");
}

absl::Status DeviceMemory::Cuda::Synchronize() {
  Scope scope;
  if (absl::Status s = state->Enter(); !s.ok()) return s;
  if (cudaError_t e = cudaStreamSynchronize(state->stream); e != cudaSuccess) {
    return CudaError(e, "stream synchronisation");
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> DeviceMemory::Cuda::Accumulate(std::span<const float> grad,
                                                      std::span<float> residual,
                                                      std::span<float> velocity, float momentum) {
  if (grad.size() != residual.size() || (!velocity.empty() && velocity.size() != residual.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceMemory::Accumulate: gradient, residual and velocity lengths ",
                     grad.size(), ", ", residual.size(), " and ", velocity.size(), " differ"));
  }
  Scope scope;
  if (absl::Status s = state->Enter(); !s.ok()) return s;
  const kernels::Accumulate acc{grad.data(), velocity.empty() ? nullptr : velocity.data(),
                                momentum};
  size_t count = 0;
  if (cudaError_t e = kernels::cuda::AccumulateCount(residual.data(), residual.size(), acc,
                                                     state->d_scalars, &count, state->stream);
      e != cudaSuccess) {
    return CudaError(e, "Accumulate");
  }
  return count;
}

absl::Status DeviceMemory::Cuda::SelectTopK(std::span<float> x, size_t k, uint32_t index_base,
                                            const kernels::Accumulate* acc,
                                            kernels::ThresholdReuse* reuse, kernels::SparseVec* out,
                                            size_t* nonfinite) {
  Scope scope;
  if (absl::Status s = state->Enter(); !s.ok()) return s;
  const size_t n = x.size();
  *nonfinite = 0;
  if (n == 0) return absl::OkStatus();
  const size_t room = std::min(k, n);
  if (absl::Status s = state->GrowDevice(std::max<size_t>(room, 1)); !s.ok()) return s;
  if (absl::Status s = state->GrowPinned(std::max<size_t>(room, 1)); !s.ok()) return s;
  // The selection count and the non-finite count side by side (the kernel
  // writes d_nonfinite = d_count + 1), so one copy reads both.
  uint64_t* d_counts = state->d_scalars + 2;
  if (cudaError_t e = kernels::cuda::SelectTopKStep(
          x.data(), n, k, index_base, acc, reuse, /*zero_selected=*/true, state->d_idx,
          state->d_val, d_counts, /*h_count=*/nullptr, state->ws.get(), state->stream,
          /*d_nonfinite=*/d_counts + 1);
      e != cudaSuccess) {
    return CudaError(e, "SelectTopK");
  }
  // The room's entries go down into the pinned buffers first (all of them:
  // the count is not known yet, and it is min(k, selectable), almost always
  // the room); the counts' copy into pageable memory returns once the
  // stream has done everything before it, so the host waits once.
  cudaError_t e = cudaSuccess;
  if (room > 0) {
    e = cudaMemcpyAsync(state->h_idx, state->d_idx, room * sizeof(uint32_t), cudaMemcpyDeviceToHost,
                        state->stream);
    if (e == cudaSuccess) {
      e = cudaMemcpyAsync(state->h_val, state->d_val, room * sizeof(float), cudaMemcpyDeviceToHost,
                          state->stream);
    }
  }
  uint64_t counts[2] = {0, 0};
  if (e == cudaSuccess) {
    e = cudaMemcpyAsync(counts, d_counts, sizeof(counts), cudaMemcpyDeviceToHost, state->stream);
  }
  if (e == cudaSuccess) e = cudaStreamSynchronize(state->stream);
  if (e != cudaSuccess) return CudaError(e, "selection copy to host");
  if (counts[0] > room) {
    return absl::InternalError(
        absl::StrCat("DeviceMemory::SelectTopK: ", counts[0], " entries selected of room ", room));
  }
  *nonfinite = static_cast<size_t>(counts[1]);
  out->idx.insert(out->idx.end(), state->h_idx, state->h_idx + counts[0]);
  out->val.insert(out->val.end(), state->h_val, state->h_val + counts[0]);
  return absl::OkStatus();
}

absl::Status DeviceMemory::Cuda::ScatterAdd(const kernels::SparseVec& v, uint32_t index_base,
                                            float scale, std::span<float> x) {
  if (v.idx.size() != v.val.size()) {
    return absl::InvalidArgumentError(absl::StrCat("DeviceMemory::ScatterAdd: ", v.idx.size(),
                                                   " indices but ", v.val.size(), " values"));
  }
  Scope scope;
  if (absl::Status s = state->Enter(); !s.ok()) return s;
  if (absl::Status s = state->Stage(v.idx, v.val, index_base, x.size()); !s.ok()) return s;
  if (cudaError_t e = kernels::cuda::ScatterAdd(state->d_idx, state->d_val, v.nnz(), index_base,
                                                scale, x.data(), state->stream);
      e != cudaSuccess) {
    return CudaError(e, "ScatterAdd");
  }
  return state->Finish("ScatterAdd");
}

absl::StatusOr<size_t> DeviceMemory::Cuda::ZeroNonFinite(std::span<float> x, size_t* first) {
  Scope scope;
  if (absl::Status s = state->Enter(); !s.ok()) return s;
  size_t count = 0, at = 0;
  if (cudaError_t e = kernels::cuda::ZeroNonFinite(x.data(), x.size(), state->d_scalars, &count,
                                                   &at, state->stream);
      e != cudaSuccess) {
    return CudaError(e, "ZeroNonFinite");
  }
  if (first != nullptr) *first = at;
  return count;
}

absl::StatusOr<double> DeviceMemory::Cuda::SumOfSquares(std::span<const float> x) {
  Scope scope;
  if (absl::Status s = state->Enter(); !s.ok()) return s;
  double sum = 0.0;
  if (cudaError_t e = kernels::cuda::SumOfSquares(x.data(), x.size(), nullptr, &sum,
                                                  state->ws.get(), state->stream);
      e != cudaSuccess) {
    return CudaError(e, "SumOfSquares");
  }
  return sum;
}

void FreeDeviceFloats(float* p, int device) {
  if (p == nullptr) return;
  std::string why;
  KeepCurrentContext keep(OpenDriver(&why));
  // On its own device: a thread without one would make device 0's context.
  if (device >= 0 && cudaSetDevice(device) != cudaSuccess) return;
  cudaFree(p);
}

#else  // !GRADEX_AGENT_CUDA

namespace {
absl::Status NoCuda() {
  return absl::UnimplementedError(
      "DeviceMemory: this gradex was built without CUDA (GRADEX_CUDA=OFF or no nvcc): device "
      "residuals need a CUDA build; pass host memory");
}
}  // namespace

struct DeviceMemory::Cuda::State {};

DeviceMemory::Cuda::Cuda() = default;
DeviceMemory::Cuda::~Cuda() = default;
absl::Status DeviceMemory::Cuda::Bind(const void*) { return NoCuda(); }
absl::Status DeviceMemory::Cuda::Allocate(size_t, float**, int*) { return NoCuda(); }
absl::Status DeviceMemory::Cuda::Upload(std::span<const float>, std::span<float>) {
  return NoCuda();
}
absl::Status DeviceMemory::Cuda::CopyToHost(std::span<const float>, std::span<float>) {
  return NoCuda();
}
absl::Status DeviceMemory::Cuda::SparseToDense(std::span<const uint32_t>, std::span<const float>,
                                               std::span<float>) {
  return NoCuda();
}
absl::Status DeviceMemory::Cuda::ZeroAt(std::span<const uint32_t>, std::span<float>) {
  return NoCuda();
}
absl::Status DeviceMemory::Cuda::Synchronize() { return NoCuda(); }
absl::StatusOr<size_t> DeviceMemory::Cuda::Accumulate(std::span<const float>, std::span<float>,
                                                      std::span<float>, float) {
  return NoCuda();
}
absl::Status DeviceMemory::Cuda::SelectTopK(std::span<float>, size_t, uint32_t,
                                            const kernels::Accumulate*, kernels::ThresholdReuse*,
                                            kernels::SparseVec*, size_t*) {
  return NoCuda();
}
absl::Status DeviceMemory::Cuda::ScatterAdd(const kernels::SparseVec&, uint32_t, float,
                                            std::span<float>) {
  return NoCuda();
}
absl::StatusOr<size_t> DeviceMemory::Cuda::ZeroNonFinite(std::span<float>, size_t*) {
  return NoCuda();
}
absl::StatusOr<double> DeviceMemory::Cuda::SumOfSquares(std::span<const float>) { return NoCuda(); }
void FreeDeviceFloats(float*, int) {}

#endif

}  // namespace gradex::agent
