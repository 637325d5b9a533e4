#include <cstring>

#include "absl/strings/str_cat.h"
#include "device/device.h"

namespace gradex::device {
namespace {

absl::Status SizeMismatch(const char* what, size_t a, size_t b) {
  return absl::InvalidArgumentError(
      absl::StrCat("device queue ", what, ": ", a, " elements against ", b));
}

// An index outside x would write past a device buffer: checked on the host,
// one pass over O(k) entries.
absl::Status CheckIndices(const char* what, std::span<const uint32_t> idx, uint32_t index_base,
                          size_t bound) {
  for (uint32_t i : idx) {
    if (i < index_base || i - index_base >= bound) {
      return absl::OutOfRangeError(absl::StrCat("device queue ", what, ": index ", i, " outside [",
                                                index_base, ", ", uint64_t{index_base} + bound,
                                                ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Buffer>> Queue::Allocate(size_t n) { return DoAllocate(n); }

absl::Status Queue::Upload(std::span<const float> host, std::span<float> x) {
  if (host.size() != x.size()) return SizeMismatch("upload", host.size(), x.size());
  CountWait();  // the host memory is the caller's again on return
  if (absl::Status s = DoUpload(host, x); !s.ok()) return s;
  counters_.to_device_bytes += host.size_bytes();
  return absl::OkStatus();
}

absl::Status Queue::Zero(std::span<float> x) { return DoZero(x); }

absl::Status Queue::CopyToHost(std::span<const float> x, std::span<float> host) {
  if (host.size() != x.size()) return SizeMismatch("download", x.size(), host.size());
  CountWait();
  if (absl::Status s = DoCopyToHost(x, host); !s.ok()) return s;
  counters_.to_host_bytes += x.size_bytes();
  return absl::OkStatus();
}

absl::Status Queue::SparseToDense(std::span<const uint32_t> idx, std::span<const float> val,
                                  std::span<float> x) {
  if (idx.size() != val.size()) return SizeMismatch("COO", idx.size(), val.size());
  if (absl::Status s = CheckIndices("COO", idx, 0, x.size()); !s.ok()) return s;
  if (absl::Status s = DoSparseToDense(idx, val, x); !s.ok()) return s;
  counters_.to_device_bytes += idx.size_bytes() + val.size_bytes();
  return absl::OkStatus();
}

absl::Status Queue::ZeroAt(std::span<const uint32_t> idx, std::span<float> x) {
  if (absl::Status s = CheckIndices("zero", idx, 0, x.size()); !s.ok()) return s;
  if (idx.empty()) return absl::OkStatus();
  if (absl::Status s = DoZeroAt(idx, x); !s.ok()) return s;
  counters_.to_device_bytes += idx.size_bytes();
  return absl::OkStatus();
}

absl::StatusOr<std::span<float>> Queue::StageToHost(std::span<const float> x) {
  CountWait();
  absl::StatusOr<std::span<float>> host = DoStageToHost(x);
  if (!host.ok()) return host.status();
  staged_ = x.size();
  counters_.to_host_bytes += x.size_bytes();
  return host;
}

absl::Status Queue::StageToDevice(std::span<float> x) {
  if (x.size() > staged_) {
    return absl::InternalError(absl::StrCat("device queue: StageToDevice of ", x.size(),
                                            " values after a StageToHost of ", staged_));
  }
  if (absl::Status s = DoStageToDevice(x); !s.ok()) return s;
  counters_.to_device_bytes += x.size_bytes();
  return absl::OkStatus();
}

absl::Status Queue::Synchronize() {
  CountWait();
  return DoSynchronize();
}

absl::StatusOr<size_t> Queue::Accumulate(std::span<const float> grad, std::span<float> residual,
                                         std::span<float> velocity, float momentum) {
  if (grad.size() != residual.size()) {
    return SizeMismatch("accumulate", grad.size(), residual.size());
  }
  if (!velocity.empty() && velocity.size() != grad.size()) {
    return SizeMismatch("velocity", velocity.size(), grad.size());
  }
  CountWait();  // the count
  return DoAccumulate(grad, residual, velocity, momentum);
}

absl::Status Queue::SelectTopK(std::span<float> x, size_t k, uint32_t index_base,
                               const kernels::Accumulate* acc, kernels::ThresholdReuse* reuse,
                               kernels::SparseVec* out, size_t* nonfinite) {
  const size_t before = out->nnz();
  // The counts and the selection come down in one copy; threshold reuse
  // reads its candidate count first.
  CountWait();
  if (reuse != nullptr && !x.empty() && k > 0) CountWait();
  size_t count = 0;
  if (absl::Status s = DoSelectTopK(x, k, index_base, acc, reuse, out, &count); !s.ok()) return s;
  if (nonfinite != nullptr && acc != nullptr) *nonfinite = count;
  counters_.to_host_bytes += (out->nnz() - before) * (sizeof(uint32_t) + sizeof(float));
  return absl::OkStatus();
}

absl::Status Queue::ScatterAdd(const kernels::SparseVec& v, uint32_t index_base, float scale,
                               std::span<float> x) {
  if (v.idx.size() != v.val.size()) return SizeMismatch("scatter", v.idx.size(), v.val.size());
  if (absl::Status s = CheckIndices("scatter", v.idx, index_base, x.size()); !s.ok()) return s;
  if (v.nnz() == 0) return absl::OkStatus();
  if (absl::Status s = DoScatterAdd(v, index_base, scale, x); !s.ok()) return s;
  counters_.to_device_bytes += v.nnz() * (sizeof(uint32_t) + sizeof(float));
  return absl::OkStatus();
}

absl::StatusOr<size_t> Queue::ZeroNonFinite(std::span<float> x, size_t* first) {
  CountWait();
  return DoZeroNonFinite(x, first);
}

absl::StatusOr<double> Queue::SumOfSquares(std::span<const float> x) {
  CountWait();
  return DoSumOfSquares(x);
}

}  // namespace gradex::device
