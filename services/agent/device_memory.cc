#include "services/agent/device_memory.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "collectives/call_frame.h"
#include "services/agent/device_memory_cuda.h"
#include "services/agent/device_staging.h"

namespace gradex::agent {
namespace {

absl::Status SizeMismatch(const char* what, size_t a, size_t b) {
  return absl::InvalidArgumentError(
      absl::StrCat("device memory ", what, ": ", a, " elements against ", b));
}

}  // namespace

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr && device_ >= 0) FreeDeviceFloats(data_, device_);
}

DeviceMemory::DeviceMemory() : cuda_(std::make_unique<Cuda>()) {}
DeviceMemory::~DeviceMemory() = default;

bool DeviceMemory::Available() {
  return DeviceStaging::HostCopiesForTesting() || DeviceStaging::Available();
}

absl::Status DeviceMemory::Bind(std::span<const float> data) {
  fake_ = DeviceStaging::HostCopiesForTesting();
  if (fake_) return absl::OkStatus();
  return cuda_->Bind(data.data());
}

absl::Status DeviceMemory::Allocate(size_t n, DeviceBuffer* out) {
  if (out->data_ != nullptr && out->device_ >= 0) FreeDeviceFloats(out->data_, out->device_);
  out->data_ = nullptr;
  out->size_ = 0;
  out->device_ = -1;
  out->host_.clear();
  if (fake_) {
    out->host_.assign(n, 0.0f);
    out->data_ = out->host_.data();
    out->size_ = n;
    return absl::OkStatus();
  }
  float* p = nullptr;
  int device = -1;
  if (absl::Status s = cuda_->Allocate(n, &p, &device); !s.ok()) return s;
  out->data_ = p;
  out->size_ = n;
  out->device_ = device;
  return absl::OkStatus();
}

absl::Status DeviceMemory::Upload(std::span<const float> host, std::span<float> x) {
  if (host.size() != x.size()) return SizeMismatch("upload", host.size(), x.size());
  if (fake_) {
    std::copy(host.begin(), host.end(), x.begin());
  } else if (absl::Status s = cuda_->Upload(host, x); !s.ok()) {
    return s;
  }
  to_device_bytes_ += host.size_bytes();
  return absl::OkStatus();
}

absl::Status DeviceMemory::CopyToHost(std::span<const float> x, std::span<float> host) {
  if (host.size() != x.size()) return SizeMismatch("download", x.size(), host.size());
  if (fake_) {
    std::copy(x.begin(), x.end(), host.begin());
  } else if (absl::Status s = cuda_->CopyToHost(x, host); !s.ok()) {
    return s;
  }
  to_host_bytes_ += x.size_bytes();
  return absl::OkStatus();
}

absl::Status DeviceMemory::SparseToDense(std::span<const uint32_t> idx, std::span<const float> val,
                                         std::span<float> x) {
  if (idx.size() != val.size()) return SizeMismatch("COO", idx.size(), val.size());
  for (uint32_t i : idx) {
    if (i >= x.size()) {
      return absl::OutOfRangeError(
          absl::StrCat("device memory: COO index ", i, " of a bucket of ", x.size()));
    }
  }
  if (fake_) {
    kernels::SparseToDense({idx.data(), val.data(), idx.size()}, 0, x.data(), x.size());
  } else if (absl::Status s = cuda_->SparseToDense(idx, val, x); !s.ok()) {
    return s;
  }
  to_device_bytes_ += idx.size_bytes() + val.size_bytes();
  return absl::OkStatus();
}

absl::Status DeviceMemory::ZeroAt(std::span<const uint32_t> idx, std::span<float> x) {
  for (uint32_t i : idx) {
    if (i >= x.size()) {
      return absl::OutOfRangeError(
          absl::StrCat("device memory: index ", i, " of a bucket of ", x.size()));
    }
  }
  if (fake_) {
    kernels::ZeroAt(idx.data(), idx.size(), 0, x.data());
  } else if (absl::Status s = cuda_->ZeroAt(idx, x); !s.ok()) {
    return s;
  }
  to_device_bytes_ += idx.size_bytes();
  return absl::OkStatus();
}

absl::Status DeviceMemory::Synchronize() {
  if (fake_) return absl::OkStatus();
  return cuda_->Synchronize();
}

absl::StatusOr<size_t> DeviceMemory::Accumulate(std::span<const float> grad,
                                                std::span<float> residual,
                                                std::span<float> velocity, float momentum) {
  if (grad.size() != residual.size())
    return SizeMismatch("accumulate", grad.size(), residual.size());
  if (!velocity.empty() && velocity.size() != grad.size()) {
    return SizeMismatch("velocity", velocity.size(), grad.size());
  }
  if (fake_) return AccumulateIntoResidual(grad, residual, velocity, momentum);
  return cuda_->Accumulate(grad, residual, velocity, momentum);
}

absl::Status DeviceMemory::SelectTopK(std::span<float> x, size_t k, uint32_t index_base,
                                      const kernels::Accumulate* acc,
                                      kernels::ThresholdReuse* reuse, kernels::SparseVec* out,
                                      size_t* nonfinite) {
  const size_t before = out->nnz();
  size_t count = 0;
  if (fake_) {
    kernels::SelectTopKStep(x.data(), x.size(), k, index_base, acc, reuse,
                            /*zero_selected=*/true, out, &count);
  } else if (absl::Status s = cuda_->SelectTopK(x, k, index_base, acc, reuse, out, &count);
             !s.ok()) {
    return s;
  }
  if (nonfinite != nullptr && acc != nullptr) *nonfinite = count;
  to_host_bytes_ += (out->nnz() - before) * (sizeof(uint32_t) + sizeof(float));
  return absl::OkStatus();
}

absl::Status DeviceMemory::ScatterAdd(const kernels::SparseVec& v, uint32_t index_base, float scale,
                                      std::span<float> x) {
  for (uint32_t i : v.idx) {
    if (i < index_base || i - index_base >= x.size()) {
      return absl::OutOfRangeError(absl::StrCat("device memory: scatter index ", i, " outside [",
                                                index_base, ", ", index_base + x.size(), ")"));
    }
  }
  if (fake_) {
    kernels::ScatterAdd(kernels::View(v), index_base, scale, x.data());
  } else if (absl::Status s = cuda_->ScatterAdd(v, index_base, scale, x); !s.ok()) {
    return s;
  }
  to_device_bytes_ += v.nnz() * (sizeof(uint32_t) + sizeof(float));
  return absl::OkStatus();
}

absl::StatusOr<size_t> DeviceMemory::ZeroNonFinite(std::span<float> x, size_t* first) {
  if (fake_) return kernels::ZeroNonFinite(x.data(), x.size(), first);
  return cuda_->ZeroNonFinite(x, first);
}

absl::StatusOr<double> DeviceMemory::SumOfSquares(std::span<const float> x) {
  if (fake_) return kernels::SumOfSquares(x.data(), x.size());
  return cuda_->SumOfSquares(x);
}

}  // namespace gradex::agent
