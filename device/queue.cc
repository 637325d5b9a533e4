// The device floor's checks, counters and the policy every backend shares:
// the pinned staging's growth (geometric, kept), the up ring, the deferred
// counts, one wait per selection whatever the block count, the pool's bound.
#include <algorithm>
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

constexpr size_t kAlign = 64;
size_t AlignUp(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

constexpr double kMiB = 1024.0 * 1024.0;

}  // namespace

absl::Status PoolExhausted(size_t bytes, const PoolUse& use, int device) {
  return absl::ResourceExhaustedError(absl::StrCat(
      "gradex device pool on GPU ", device, ": ", static_cast<uint64_t>(bytes / kMiB),
      " MiB more would pass its bound of ", static_cast<uint64_t>(use.limit / kMiB),
      " MiB (half the GPU's memory; ", static_cast<uint64_t>(use.used / kMiB),
      " MiB in use for residuals, velocities and scratch): pass the largest buckets as host "
      "memory (Memory::kHost), turn momentum_correction off (it doubles the device state) or "
      "close clients that are done"));
}

absl::Status Queue::TakeFault() { return std::exchange(fault_, absl::OkStatus()); }

absl::Status Queue::Waited(absl::Status s) {
  ++counters_.host_waits;
  if (s.ok()) {
    // Every wait drains the queue's stream: the copies out of the ring are
    // done and the deferred counts have landed.
    pending_ = false;
    ++drains_;
    up_used_ = 0;
    up_demand_ = 0;
  } else if (fault_.ok()) {
    fault_ = s;
  }
  return s;
}

absl::Status Queue::ReservePinned(Pinned which, size_t bytes) {
  std::span<std::byte>& have = pinned_[static_cast<int>(which)];
  if (bytes <= have.size()) return absl::OkStatus();
  // Block sizes change every call (balanced blocks, a result's nnz): room
  // for half as much again, at least doubling, so growth stops within the
  // first steps.
  const size_t want = AlignUp(std::max(bytes + bytes / 2, 2 * have.size()));
  absl::StatusOr<std::span<std::byte>> got = DoGrowPinned(which, want);
  if (!got.ok()) return got.status();
  ++counters_.allocations;
  have = *got;
  return absl::OkStatus();
}

absl::StatusOr<std::span<std::byte>> Queue::TakeUp(size_t bytes) {
  bytes = (bytes + 15) / 16 * 16;  // each entry aligned for the copies
  up_demand_ += bytes;
  if (up_used_ + bytes > pinned(Pinned::kUp).size()) {
    // A new region with room for twice all this period asked for: what a
    // bucket sends up (its discards, its result) moves with the data from
    // step to step, more than the selection's room does. Copies queued from
    // the old one may still read it, and it stays valid: no wait.
    if (absl::Status s = ReservePinned(Pinned::kUp, up_demand_ + up_demand_ / 3); !s.ok()) {
      return s;
    }
    up_used_ = 0;
  }
  std::span<std::byte> span = pinned(Pinned::kUp).subspan(up_used_, bytes);
  up_used_ += bytes;
  return span;
}

absl::StatusOr<std::pair<std::span<const uint32_t>, std::span<const float>>> Queue::StageUp(
    std::span<const uint32_t> idx, std::span<const float> val) {
  const size_t values_at = (idx.size_bytes() + 15) / 16 * 16;
  absl::StatusOr<std::span<std::byte>> ring = TakeUp(values_at + val.size_bytes());
  if (!ring.ok()) return ring.status();
  std::byte* at = ring->data();
  auto* i = reinterpret_cast<uint32_t*>(at);
  auto* v = reinterpret_cast<float*>(at + values_at);
  if (!idx.empty()) std::memcpy(i, idx.data(), idx.size_bytes());
  if (!val.empty()) std::memcpy(v, val.data(), val.size_bytes());
  return std::make_pair(std::span<const uint32_t>(i, idx.size()),
                        std::span<const float>(v, val.size()));
}

absl::StatusOr<std::unique_ptr<Buffer>> Queue::Allocate(size_t n) {
  absl::StatusOr<PoolUse> use = DoPoolUse();
  if (!use.ok()) return use.status();
  const uint64_t bytes = n * sizeof(float);
  if (use->limit > 0 && use->used + bytes > use->limit) return PoolExhausted(bytes, *use, device_);
  absl::StatusOr<std::unique_ptr<Buffer>> b = DoAllocate(n);
  if (b.ok()) Queued();
  return b;
}

absl::Status Queue::Upload(std::span<const float> host, std::span<float> x) {
  if (host.size() != x.size()) return SizeMismatch("upload", host.size(), x.size());
  // Pageable memory, the caller's again on return.
  if (absl::Status s = Waited(DoUpload(host, x)); !s.ok()) return s;
  counters_.to_device_bytes += host.size_bytes();
  return absl::OkStatus();
}

absl::Status Queue::Zero(std::span<float> x) {
  Queued();
  return DoZero(x);
}

absl::Status Queue::CopyToHost(std::span<const float> x, std::span<float> host) {
  if (host.size() != x.size()) return SizeMismatch("download", x.size(), host.size());
  if (absl::Status s = Waited(DoCopyToHost(x, host)); !s.ok()) return s;
  counters_.to_host_bytes += x.size_bytes();
  return absl::OkStatus();
}

absl::Status Queue::SparseToDense(std::span<const uint32_t> idx, std::span<const float> val,
                                  std::span<float> x) {
  if (idx.size() != val.size()) return SizeMismatch("COO", idx.size(), val.size());
  if (absl::Status s = CheckIndices("COO", idx, 0, x.size()); !s.ok()) return s;
  auto staged = StageUp(idx, val);
  if (!staged.ok()) return staged.status();
  Queued();
  if (absl::Status s = DoSparseToDense(staged->first, staged->second, x); !s.ok()) return s;
  counters_.to_device_bytes += idx.size_bytes() + val.size_bytes();
  return absl::OkStatus();
}

absl::Status Queue::ZeroAt(std::span<const uint32_t> idx, std::span<float> x) {
  if (absl::Status s = CheckIndices("zero", idx, 0, x.size()); !s.ok()) return s;
  if (idx.empty()) return absl::OkStatus();
  auto staged = StageUp(idx, {});
  if (!staged.ok()) return staged.status();
  Queued();
  if (absl::Status s = DoZeroAt(staged->first, x); !s.ok()) return s;
  counters_.to_device_bytes += idx.size_bytes();
  return absl::OkStatus();
}

absl::StatusOr<std::span<float>> Queue::UpStaging(size_t n) {
  absl::StatusOr<std::span<std::byte>> ring = TakeUp(n * sizeof(float));
  if (!ring.ok()) return ring.status();
  return std::span<float>(reinterpret_cast<float*>(ring->data()), n);
}

absl::Status Queue::UploadStaged(std::span<const float> staged, std::span<float> x) {
  if (staged.size() != x.size()) return SizeMismatch("staged upload", staged.size(), x.size());
  const std::span<std::byte> ring = pinned(Pinned::kUp);
  const auto* at = reinterpret_cast<const std::byte*>(staged.data());
  if (!staged.empty() && (at < ring.data() || at + staged.size_bytes() > ring.data() + up_used_)) {
    return absl::InternalError("device queue: UploadStaged of a span UpStaging did not give");
  }
  if (staged.empty()) return absl::OkStatus();
  Queued();
  if (absl::Status s = DoUploadStaged(staged, x); !s.ok()) return s;
  counters_.to_device_bytes += staged.size_bytes();
  return absl::OkStatus();
}

absl::Status Queue::ZeroNonFiniteLater(std::span<float> x) {
  Queued();
  if (absl::Status s = DoZeroNonFiniteLater(x); !s.ok()) return s;
  deferred_ = true;
  deferred_drain_ = drains_;
  return absl::OkStatus();
}

absl::StatusOr<size_t> Queue::TakeNonFinite(size_t* first) {
  if (!deferred_) return absl::InternalError("device queue: TakeNonFinite without its operation");
  // Only a wait after it (each drains the stream) brings the count down.
  if (drains_ == deferred_drain_) {
    if (absl::Status s = Synchronize(); !s.ok()) return s;
  }
  deferred_ = false;
  size_t at = 0;
  const size_t count = DoTakeNonFinite(&at);
  if (first != nullptr) *first = at;
  return count;
}

absl::Status Queue::AccumulateLater(std::span<const float> grad, std::span<float> residual,
                                    std::span<float> velocity, float momentum) {
  if (grad.size() != residual.size()) {
    return SizeMismatch("accumulate", grad.size(), residual.size());
  }
  if (!velocity.empty() && velocity.size() != grad.size()) {
    return SizeMismatch("velocity", velocity.size(), grad.size());
  }
  Queued();
  return DoAccumulateLater(grad, residual, velocity, momentum);
}

absl::StatusOr<std::span<float>> Queue::StageToHost(std::span<const float> x) {
  if (absl::Status s = ReservePinned(Pinned::kBucket, x.size_bytes()); !s.ok()) return s;
  if (absl::Status s = Waited(DoStageToHost(x)); !s.ok()) return s;
  staged_ = x.size();
  counters_.to_host_bytes += x.size_bytes();
  return std::span<float>(reinterpret_cast<float*>(pinned(Pinned::kBucket).data()), x.size());
}

absl::Status Queue::StageToDevice(std::span<float> x) {
  if (x.size() > staged_) {
    return absl::InternalError(absl::StrCat("device queue: StageToDevice of ", x.size(),
                                            " values after a StageToHost of ", staged_));
  }
  Queued();
  if (absl::Status s = DoStageToDevice(x); !s.ok()) return s;
  counters_.to_device_bytes += x.size_bytes();
  return absl::OkStatus();
}

absl::Status Queue::Synchronize() { return Waited(DoSynchronize()); }

absl::StatusOr<size_t> Queue::Accumulate(std::span<const float> grad, std::span<float> residual,
                                         std::span<float> velocity, float momentum) {
  if (grad.size() != residual.size()) {
    return SizeMismatch("accumulate", grad.size(), residual.size());
  }
  if (!velocity.empty() && velocity.size() != grad.size()) {
    return SizeMismatch("velocity", velocity.size(), grad.size());
  }
  absl::StatusOr<size_t> count = DoAccumulate(grad, residual, velocity, momentum);
  if (absl::Status s = Waited(count.status()); !s.ok()) return s;
  return count;
}

absl::Status Queue::SelectTopK(std::span<float> x, size_t k, uint32_t index_base,
                               const kernels::Accumulate* acc, kernels::ThresholdReuse* reuse,
                               kernels::SparseVec* out, size_t* nonfinite) {
  const size_t before = out->nnz();
  const size_t room = std::min(k, x.size());
  if (absl::Status s = ReservePinned(Pinned::kDown, std::max<size_t>(room, 1) * 8 + kAlign);
      !s.ok()) {
    return s;
  }
  // The selection's counts and entries come down in one wait.
  size_t count = 0;
  if (absl::Status s = Waited(DoSelectTopK(x, k, index_base, acc, out, &count)); !s.ok()) return s;
  if (nonfinite != nullptr && acc != nullptr) *nonfinite = count;
  kernels::NoteSelection(reuse, *out, before, x.size(), k);
  counters_.to_host_bytes += (out->nnz() - before) * (sizeof(uint32_t) + sizeof(float));
  return absl::OkStatus();
}

absl::Status Queue::SelectTopKBlocks(std::span<float> x, const std::vector<size_t>& bounds,
                                     const std::vector<size_t>& keeps,
                                     const kernels::Accumulate* acc,
                                     std::vector<kernels::ThresholdReuse>* reuse,
                                     std::vector<kernels::SparseVec>* out, size_t* nonfinite) {
  const size_t blocks = bounds.empty() ? 0 : std::min(keeps.size(), bounds.size() - 1);
  size_t room = 0;
  for (size_t b = 0; b < blocks; ++b) {
    if (bounds[b] > x.size() || bounds[b + 1] > x.size()) {
      return absl::OutOfRangeError(absl::StrCat("device queue blocks: block ", b, " [", bounds[b],
                                                ", ", bounds[b + 1], ") outside ", x.size()));
    }
    if (bounds[b + 1] > bounds[b]) room += std::min(keeps[b], bounds[b + 1] - bounds[b]);
  }
  out->resize(blocks);
  for (auto& o : *out) o.clear();
  if (reuse != nullptr) reuse->resize(blocks);
  if (absl::Status s = ReservePinned(Pinned::kDown, std::max<size_t>(room, 1) * 8 + kAlign);
      !s.ok()) {
    return s;
  }
  // Every block's counts and entries come down in one wait.
  size_t count = 0;
  if (absl::Status s = Waited(DoSelectTopKBlocks(x, bounds, keeps, acc, out, &count)); !s.ok()) {
    return s;
  }
  if (nonfinite != nullptr && acc != nullptr) *nonfinite = count;
  for (size_t b = 0; b < blocks; ++b) {
    const size_t len = bounds[b + 1] > bounds[b] ? bounds[b + 1] - bounds[b] : 0;
    if (reuse != nullptr) kernels::NoteSelection(&(*reuse)[b], (*out)[b], 0, len, keeps[b]);
    counters_.to_host_bytes += (*out)[b].nnz() * (sizeof(uint32_t) + sizeof(float));
  }
  return absl::OkStatus();
}

absl::Status Queue::ScatterAdd(const kernels::SparseVec& v, uint32_t index_base, float scale,
                               std::span<float> x) {
  if (v.idx.size() != v.val.size()) return SizeMismatch("scatter", v.idx.size(), v.val.size());
  if (absl::Status s = CheckIndices("scatter", v.idx, index_base, x.size()); !s.ok()) return s;
  if (v.nnz() == 0) return absl::OkStatus();
  auto staged = StageUp(v.idx, v.val);
  if (!staged.ok()) return staged.status();
  Queued();
  if (absl::Status s = DoScatterAdd(staged->first, staged->second, index_base, scale, x); !s.ok()) {
    return s;
  }
  counters_.to_device_bytes += v.nnz() * (sizeof(uint32_t) + sizeof(float));
  return absl::OkStatus();
}

absl::StatusOr<size_t> Queue::ZeroNonFinite(std::span<float> x, size_t* first) {
  absl::StatusOr<size_t> count = DoZeroNonFinite(x, first);
  if (absl::Status s = Waited(count.status()); !s.ok()) return s;
  return count;
}

absl::StatusOr<double> Queue::SumOfSquares(std::span<const float> x) {
  absl::StatusOr<double> sum = DoSumOfSquares(x);
  if (absl::Status s = Waited(sum.status()); !s.ok()) return s;
  return sum;
}

}  // namespace gradex::device
