// The GPU top-k step kernels: SelectTopKStep (the accumulation fused into the
// select, threshold reuse), BlockTopKStep (a bucket's blocks with no host
// synchronisation between them) and CompactAboveStep.
//
// Threshold reuse (SelectTopKStep with a ThresholdReuse): one pass
// accumulates and counts per tile the entries at or above the predicted
// floor, a second writes them in index order; the exact select then runs on
// those candidates alone. It reads the candidate count on the host (one
// synchronisation) to choose between that and the full select.
//
// The step's count of NaN and infinite entries comes from the pass that reads
// all of x after the accumulation: pass 1, or the reuse gather. The pass-1
// histogram cannot give it: +Inf shares bucket 2040 with finite magnitudes.
#include <cub/block/block_reduce.cuh>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/sparse_cuda.h"
#include "kernels/cuda/topk_internal.cuh"

namespace gradex::kernels::cuda {
namespace detail {
namespace {

// kAcc: x += acc; nonfinite (may be null) gets the count of NaN and
// infinite entries of x afterwards added (of x as it is without kAcc).
template <bool kAcc>
__global__ void __launch_bounds__(kHistThreads)
    AccumulateKernel(float* __restrict__ x, size_t n, DevAcc acc, ull* nonfinite) {
  ull bad = 0;
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    float v = x[i];
    if (kAcc) {
      v = Accumulated(v, acc, i);
      x[i] = v;
    }
    bad += KeyOf(v) >= kInfKey ? 1 : 0;
  }
  if (nonfinite != nullptr) AddBlockCount<kHistThreads>(bad, nonfinite);
}

// The count phase of the ordered compaction of keys in [floor, kInfKey], with
// the accumulation (kAcc) done as each entry is read: per tile, the count of
// candidates (the scatter phase reads the accumulated x). nonfinite (may be
// null) gets the count of NaN and infinite entries after the accumulation
// added.
template <bool kAcc>
__global__ void __launch_bounds__(kThreads)
    AccumulateCountKernel(float* __restrict__ x, size_t n, DevAcc acc, uint32_t floor,
                          ulonglong2* tile_counts, ull* nonfinite) {
  uint32_t packed = 0;  // non-finite << 16 | candidates; a tile holds 4096 < 2^16
  // Striped (TileEntry): a warp's loads and stores touch 32 consecutive
  // entries per instruction; a tile's count does not depend on the order.
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const size_t i = TileEntry(j);
    if (i < n) {
      float v = x[i];
      if (kAcc) {
        v = Accumulated(v, acc, i);
        x[i] = v;
      }
      const uint32_t key = KeyOf(v);
      packed += (static_cast<uint32_t>(key >= kInfKey) << 16) |
                static_cast<uint32_t>(key >= floor && key <= kInfKey);
    }
  }
  using Reduce = cub::BlockReduce<uint32_t, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const uint32_t sum = Reduce(tmp).Sum(packed);
  if (threadIdx.x == 0) {
    tile_counts[blockIdx.x] = make_ulonglong2(sum & 0xffffu, 0);
    if (nonfinite != nullptr && (sum >> 16) != 0) atomicAdd(nonfinite, static_cast<ull>(sum >> 16));
  }
}

// Writes a selected candidate: its (global) index and value.
struct CandidateWriter {
  const uint32_t* ci;
  const float* cv;
  uint32_t* idx;
  float* val;
  __device__ void operator()(size_t i, ull pos) const {
    idx[pos] = ci[i];
    val[pos] = cv[i];
  }
};

struct ReuseScratch {
  CompactScratch tiles;  // for n
  ull* gathered;
  uint32_t* ci;
  float* cv;
  ThresholdScratch ts;    // over the candidates
  CompactScratch ctiles;  // for the candidates
  DeviceThreshold* thr;
  ull* own_count;
};

ReuseScratch TakeReuseScratch(Carver& c, size_t n, size_t cap) {
  ReuseScratch r;
  r.tiles = TakeCompactScratch(c, n);
  r.gathered = c.Take<ull>(1);
  r.ci = c.Take<uint32_t>(cap);
  r.cv = c.Take<float>(cap);
  r.ts = TakeThresholdScratch(c, cap);
  r.ctiles = TakeCompactScratch(c, cap);
  r.thr = c.Take<DeviceThreshold>(1);
  r.own_count = c.Take<ull>(1);
  return r;
}

// The ordered compaction of the keys in [lo, +Inf] of x into idx/val (up to
// capacity; the full count to *count), with `acc` (may be null) accumulated
// into x by its count pass: the reuse gather of SelectTopKStep and
// CompactAboveStep. That pass adds the count of NaN and infinite entries of
// x after the accumulation to *nonfinite (may be null).
cudaError_t AccumulateCompactRange(float* x, size_t n, const DevAcc* acc, uint32_t lo,
                                   uint32_t index_base, uint32_t* idx, float* val, size_t capacity,
                                   const CompactScratch& cs, ull* count, cudaStream_t stream,
                                   ull* nonfinite = nullptr) {
  const size_t tiles = NumTiles(n);
  if (tiles > 0x7fffffffu) return cudaErrorInvalidValue;
  const unsigned grid = static_cast<unsigned>(tiles);
  if (acc != nullptr) {
    AccumulateCountKernel<true>
        <<<grid, kThreads, 0, stream>>>(x, n, *acc, lo, cs.tile_counts, nonfinite);
  } else {
    AccumulateCountKernel<false>
        <<<grid, kThreads, 0, stream>>>(x, n, DevAcc{}, lo, cs.tile_counts, nonfinite);
  }
  ScanTilesKernel<<<1, kScanThreads, 0, stream>>>(cs.tile_counts, cs.tile_offsets, tiles, nullptr,
                                                  count);
  ScatterTilesKernel<<<grid, kThreads, 0, stream>>>(RangeClassify{x, lo, kInfKey},
                                                    PairWriter{x, index_base, idx, val}, n,
                                                    cs.tile_offsets, nullptr, capacity);
  return cudaGetLastError();
}

}  // namespace
}  // namespace detail

using detail::ull;

namespace {

uint32_t HostThresholdKey(const DeviceThreshold* d_thr, cudaStream_t stream, cudaError_t* e) {
  DeviceThreshold t{};
  *e = cudaMemcpyAsync(&t, d_thr, sizeof t, cudaMemcpyDeviceToHost, stream);
  if (*e == cudaSuccess) *e = cudaStreamSynchronize(stream);
  return t.threshold_key;
}

}  // namespace

cudaError_t SelectTopKStep(float* d_x, size_t n, size_t k, uint32_t index_base,
                           const Accumulate* acc, ThresholdReuse* reuse, bool zero_selected,
                           uint32_t* d_idx, float* d_val, uint64_t* d_count, size_t* h_count,
                           Workspace* ws, cudaStream_t stream, uint64_t* d_nonfinite) {
  using detail::DevAcc;
  const DevAcc dacc = acc ? DevAcc{acc->grad, acc->velocity, acc->momentum} : DevAcc{};
  const DevAcc* pacc = acc ? &dacc : nullptr;
  // Counted by whichever pass first reads all of x after the accumulation;
  // null once counted.
  ull* nonfinite = reinterpret_cast<ull*>(d_nonfinite);
  if (nonfinite != nullptr) {
    GRADEX_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(nonfinite, 0, sizeof(ull), stream));
  }
  if (n == 0 || k == 0) {
    if (n > 0 && (pacc != nullptr || nonfinite != nullptr)) {
      const unsigned blocks = detail::HistBlocks(n);
      if (pacc != nullptr) {
        detail::AccumulateKernel<true>
            <<<blocks, detail::kHistThreads, 0, stream>>>(d_x, n, dacc, nonfinite);
      } else {
        detail::AccumulateKernel<false>
            <<<blocks, detail::kHistThreads, 0, stream>>>(d_x, n, DevAcc{}, nonfinite);
      }
    }
    if (d_count != nullptr) {
      GRADEX_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(d_count, 0, sizeof(uint64_t), stream));
    }
    if (h_count != nullptr) {
      *h_count = 0;
      GRADEX_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    }
    return cudaGetLastError();
  }
  bool tried = false;
  size_t gathered = 0;
  if (reuse != nullptr) {
    ++reuse->steps;
    if (reuse->last_key != 0 && k < n) {
      tried = true;
      const size_t cap = ReuseCandidateCap(k, n);
      detail::Carver sizing(nullptr);
      detail::TakeReuseScratch(sizing, n, cap);
      GRADEX_CUDA_RETURN_IF_ERROR(ws->Reserve(sizing.bytes()));
      detail::Carver c(static_cast<char*>(ws->data()));
      const detail::ReuseScratch r = detail::TakeReuseScratch(c, n, cap);
      GRADEX_CUDA_RETURN_IF_ERROR(
          detail::AccumulateCompactRange(d_x, n, pacc, ReuseFloor(*reuse), index_base, r.ci, r.cv,
                                         cap, r.tiles, r.gathered, stream, nonfinite));
      pacc = nullptr;  // x holds the sum now, and its non-finite entries are counted
      nonfinite = nullptr;
      uint64_t m = 0;
      GRADEX_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(&m, r.gathered, sizeof m, cudaMemcpyDeviceToHost, stream));
      GRADEX_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
      gathered = static_cast<size_t>(m);
      if (gathered >= k && gathered <= cap) {
        ull* count = d_count ? reinterpret_cast<ull*>(d_count) : r.own_count;
        GRADEX_CUDA_RETURN_IF_ERROR(
            detail::ThresholdImpl(r.cv, gathered, k, nullptr, r.thr, r.ts, stream));
        const ull* take = reinterpret_cast<const ull*>(&r.thr->take_at_threshold);
        GRADEX_CUDA_RETURN_IF_ERROR(
            detail::Compact(detail::SelectedClassify{r.cv, r.thr},
                            detail::CandidateWriter{r.ci, r.cv, d_idx, d_val}, gathered, take, k,
                            r.ctiles, count, stream));
        if (zero_selected) {
          detail::ZeroSelectedKernel<<<detail::HistBlocks(k), detail::kHistThreads, 0, stream>>>(
              d_x, d_idx, index_base, count, k);
        }
        GRADEX_CUDA_RETURN_IF_ERROR(cudaGetLastError());
        cudaError_t e = cudaSuccess;
        const uint32_t thr = HostThresholdKey(r.thr, stream, &e);
        GRADEX_CUDA_RETURN_IF_ERROR(e);
        ++reuse->hits;
        UpdateReuse(reuse, thr, true, gathered, k);
        return detail::FinishCount(reinterpret_cast<uint64_t*>(count), h_count, stream);
      }
      ++(gathered < k ? reuse->misses_few : reuse->misses_many);
    }
  }
  ull* count = nullptr;
  DeviceThreshold* thr = nullptr;
  GRADEX_CUDA_RETURN_IF_ERROR(detail::SelectImpl(d_x, n, k, index_base, d_idx, d_val,
                                                 reinterpret_cast<ull*>(d_count), zero_selected, ws,
                                                 stream, &count, pacc, &thr, nonfinite));
  if (reuse != nullptr) {
    cudaError_t e = cudaSuccess;
    const uint32_t key = HostThresholdKey(thr, stream, &e);
    GRADEX_CUDA_RETURN_IF_ERROR(e);
    UpdateReuse(reuse, key, tried, gathered, k);
  }
  return detail::FinishCount(reinterpret_cast<uint64_t*>(count), h_count, stream);
}

cudaError_t BlockTopKStep(float* d_x, const size_t* bounds, const size_t* k, size_t blocks,
                          const Accumulate* acc, bool zero_selected, uint32_t* d_idx, float* d_val,
                          const size_t* offsets, uint64_t* d_counts, uint64_t* d_nonfinite,
                          Workspace* ws, cudaStream_t stream) {
  using detail::DevAcc;
  if (blocks == 0) return cudaSuccess;
  if (d_counts == nullptr) return cudaErrorInvalidValue;
  ull* nonfinite = reinterpret_cast<ull*>(d_nonfinite);
  GRADEX_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(d_counts, 0, blocks * sizeof(uint64_t), stream));
  if (nonfinite != nullptr) {
    GRADEX_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(nonfinite, 0, sizeof(ull), stream));
  }
  // Block after block on the stream, the workspace reused in its order: no
  // host synchronisation between them (the caller reads every count at once).
  for (size_t b = 0; b < blocks; ++b) {
    const size_t off = bounds[b];
    const size_t len = bounds[b + 1] > off ? bounds[b + 1] - off : 0;
    if (len == 0) continue;
    DevAcc part{};
    if (acc != nullptr) {
      part = DevAcc{acc->grad + off, acc->velocity != nullptr ? acc->velocity + off : nullptr,
                    acc->momentum};
    }
    const DevAcc* pacc = acc != nullptr ? &part : nullptr;
    if (k[b] == 0) {
      // SelectTopKStep's k == 0: the accumulation and the count, nothing kept.
      if (pacc != nullptr || nonfinite != nullptr) {
        const unsigned grid = detail::HistBlocks(len);
        if (pacc != nullptr) {
          detail::AccumulateKernel<true>
              <<<grid, detail::kHistThreads, 0, stream>>>(d_x + off, len, part, nonfinite);
        } else {
          detail::AccumulateKernel<false>
              <<<grid, detail::kHistThreads, 0, stream>>>(d_x + off, len, DevAcc{}, nonfinite);
        }
      }
      continue;
    }
    ull* used = nullptr;
    GRADEX_CUDA_RETURN_IF_ERROR(
        detail::SelectImpl(d_x + off, len, k[b], static_cast<uint32_t>(off), d_idx + offsets[b],
                           d_val + offsets[b], reinterpret_cast<ull*>(d_counts + b), zero_selected,
                           ws, stream, &used, pacc, nullptr, nonfinite));
  }
  return cudaGetLastError();
}

cudaError_t CompactAboveStep(float* d_x, size_t n, const Accumulate* acc, float threshold,
                             uint32_t index_base, uint32_t* d_idx, float* d_val, size_t capacity,
                             uint64_t* d_count, size_t* h_count, Workspace* ws,
                             cudaStream_t stream) {
  if (acc == nullptr) {
    return CompactAbove(d_x, n, threshold, index_base, d_idx, d_val, capacity, d_count, h_count, ws,
                        stream);
  }
  detail::CompactScratch cs;
  ull* count = nullptr;
  GRADEX_CUDA_RETURN_IF_ERROR(detail::ReserveCompact(ws, n, d_count, &cs, &count));
  if (n == 0) {
    GRADEX_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(count, 0, sizeof(ull), stream));
  } else {
    const detail::DevAcc dacc{acc->grad, acc->velocity, acc->momentum};
    GRADEX_CUDA_RETURN_IF_ERROR(
        detail::AccumulateCompactRange(d_x, n, &dacc, CompactAboveKey(threshold), index_base, d_idx,
                                       d_val, capacity, cs, count, stream));
  }
  return detail::FinishCount(reinterpret_cast<uint64_t*>(count), h_count, stream);
}

}  // namespace gradex::kernels::cuda
