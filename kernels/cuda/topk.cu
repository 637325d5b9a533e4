// Top-k on the GPU: radix select on magnitude keys in three histogram passes
// (11/11/9 bits, the same buckets as the CPU), each pass re-reading x and
// counting only the candidates of the bucket chosen before; the choices stay
// on the device, so nothing synchronises with the host. Then the ordered
// compaction keeps the entries above the threshold and the first
// `take_at_threshold` ties by index.
#include <cub/block/block_scan.cuh>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/sparse_cuda.h"

namespace gradex::kernels::cuda {
namespace detail {
namespace {

// Pass 1 buckets as on the CPU: b = (key + 2^20 - 1) >> 20; 0 holds the zeros,
// b >= 1 the keys [((b-1) << 20) + 1, b << 20]; +Inf is 2040, NaN above.
constexpr int kShift1 = 20;
constexpr uint32_t kBias1 = (1u << kShift1) - 1;
constexpr int kBuckets1 = 2049;
constexpr int kTopReal = 2040;
constexpr int kBuckets2 = 2048;  // bits 19..9 of key - lo
constexpr int kBuckets3 = 512;   // bits 8..0
constexpr int kHistThreads = 512;
constexpr int kSelectThreads = 1024;
constexpr int kSelectItems = 2;  // kSelectThreads * kSelectItems >= every bucket count

struct SelectState {
  uint32_t lo, hi;  // key range of the candidates for the next pass
  int active;       // 0: nothing to select
  ull need;         // entries still to take among the candidates
  ull above;        // entries above the candidates
};

__global__ void __launch_bounds__(kHistThreads)
    Hist1Kernel(const float* __restrict__ x, size_t n, ull* __restrict__ hist) {
  __shared__ uint32_t h[kBuckets1];
  for (int b = threadIdx.x; b < kBuckets1; b += blockDim.x) h[b] = 0;
  __syncthreads();
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    atomicAdd(&h[(KeyOf(x[i]) + kBias1) >> kShift1], 1u);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < kBuckets1; b += blockDim.x) {
    if (h[b] != 0) atomicAdd(&hist[b], static_cast<ull>(h[b]));
  }
}

// Passes 2 and 3: candidates are keys in [st->lo, st->hi]; bin = (key - lo) >> shift.
template <int kBins>
__global__ void __launch_bounds__(kHistThreads)
    HistSubKernel(const float* __restrict__ x, size_t n, const SelectState* st, int shift,
                  ull* __restrict__ hist) {
  if (!st->active) return;
  const uint32_t lo = st->lo, hi = st->hi;
  __shared__ uint32_t h[kBins];
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) h[b] = 0;
  __syncthreads();
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint32_t k = KeyOf(x[i]);
    if (k >= lo && k <= hi) atomicAdd(&h[(k - lo) >> shift], 1u);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) {
    if (h[b] != 0) atomicAdd(&hist[b], static_cast<ull>(h[b]));
  }
}

// Finds, scanning bins from `top` down, the bin where the cumulative count
// reaches `need` (pass 1: min(k, total)). Updates the state for the next
// pass, or (last pass) writes the threshold.
// pass 1: bins kTopReal..1; pass 2: 2047..0; pass 3: 511..0.
__global__ void __launch_bounds__(kSelectThreads)
    SelectBinKernel(const ull* hist, int pass, ull k, SelectState* st, DeviceThreshold* out) {
  if (pass > 1 && !st->active) return;
  const int top = pass == 1 ? kTopReal : (pass == 2 ? kBuckets2 - 1 : kBuckets3 - 1);
  const int bottom = pass == 1 ? 1 : 0;
  // Read before the scan: the one thread that finds the bin rewrites the state.
  const ull prev_need = pass == 1 ? 0 : st->need;
  ull c[kSelectItems];
  int bin[kSelectItems];
#pragma unroll
  for (int j = 0; j < kSelectItems; ++j) {
    bin[j] = top - (static_cast<int>(threadIdx.x) * kSelectItems + j);  // descending order
    c[j] = bin[j] >= bottom ? hist[bin[j]] : 0;
  }
  using Scan = cub::BlockScan<ull, kSelectThreads>;
  __shared__ typename Scan::TempStorage tmp;
  ull excl[kSelectItems];
  ull total;
  Scan(tmp).ExclusiveSum(c, excl, total);
  const ull need = pass == 1 ? (k < total ? k : total) : prev_need;
  if (pass == 1 && need == 0) {
    if (threadIdx.x == 0) {
      st->active = 0;
      *out = DeviceThreshold{0, 0, 0, 0};
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < kSelectItems; ++j) {
    if (bin[j] < bottom || c[j] == 0) continue;
    if (excl[j] < need && excl[j] + c[j] >= need) {  // exactly one (bin, thread)
      const uint32_t b = static_cast<uint32_t>(bin[j]);
      if (pass == 1) {
        st->active = 1;
        st->lo = ((b - 1) << kShift1) + 1;
        st->hi = b << kShift1;
        st->above = excl[j];
        st->need = need - excl[j];
      } else if (pass == 2) {
        st->lo = st->lo + (b << 9);
        st->hi = st->lo + 511;
        st->above += excl[j];
        st->need = need - excl[j];
      } else {
        const ull above = st->above + excl[j];
        *out = DeviceThreshold{st->lo + b, 0, need - excl[j], above};
      }
    }
  }
}

struct SelectedClassify {
  const float* x;
  const DeviceThreshold* t;
  __device__ int operator()(size_t i) const {
    const uint32_t thr = t->threshold_key;
    const uint32_t k = KeyOf(x[i]);
    if (thr == 0 || k > kInfKey) return 0;
    return k > thr ? 1 : (k == thr ? 2 : 0);
  }
};

__global__ void ZeroSelectedKernel(float* x, const uint32_t* idx, uint32_t index_base,
                                   const ull* count, size_t capacity) {
  const ull c = *count < capacity ? *count : capacity;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < c;
       i += size_t{gridDim.x} * blockDim.x) {
    x[idx[i] - index_base] = 0.0f;
  }
}

unsigned HistBlocks(size_t n) {
  int dev = 0, sms = 1;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    sms = 1;
  }
  const size_t want = (n + kHistThreads - 1) / kHistThreads;
  const size_t cap = static_cast<size_t>(sms) * 4;
  return static_cast<unsigned>(want < 1 ? 1 : (want < cap ? want : cap));
}

struct ThresholdScratch {
  ull* hist1;
  ull* hist2;
  ull* hist3;
  SelectState* state;
};

ThresholdScratch TakeThresholdScratch(Carver& c) {
  // The three histograms are adjacent so that one memset clears them.
  ull* h = c.Take<ull>(kBuckets1 + kBuckets2 + kBuckets3);
  return {h, h ? h + kBuckets1 : nullptr, h ? h + kBuckets1 + kBuckets2 : nullptr,
          c.Take<SelectState>(1)};
}

cudaError_t ThresholdImpl(const float* x, size_t n, size_t k, DeviceThreshold* out,
                          const ThresholdScratch& s, cudaStream_t stream) {
  if (n == 0 || k == 0) return cudaMemsetAsync(out, 0, sizeof *out, stream);
  GRADEX_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(s.hist1, 0, sizeof(ull) * (kBuckets1 + kBuckets2 + kBuckets3), stream));
  const unsigned blocks = HistBlocks(n);
  Hist1Kernel<<<blocks, kHistThreads, 0, stream>>>(x, n, s.hist1);
  SelectBinKernel<<<1, kSelectThreads, 0, stream>>>(s.hist1, 1, k, s.state, out);
  HistSubKernel<kBuckets2><<<blocks, kHistThreads, 0, stream>>>(x, n, s.state, 9, s.hist2);
  SelectBinKernel<<<1, kSelectThreads, 0, stream>>>(s.hist2, 2, k, s.state, out);
  HistSubKernel<kBuckets3><<<blocks, kHistThreads, 0, stream>>>(x, n, s.state, 0, s.hist3);
  SelectBinKernel<<<1, kSelectThreads, 0, stream>>>(s.hist3, 3, k, s.state, out);
  return cudaGetLastError();
}

cudaError_t CompactSelectedImpl(const float* x, size_t n, const DeviceThreshold* t,
                                uint32_t index_base, uint32_t* idx, float* val, size_t capacity,
                                const CompactScratch& s, ull* count, cudaStream_t stream) {
  static_assert(sizeof(DeviceThreshold) == 24, "layout shared with the device code");
  const ull* take = reinterpret_cast<const ull*>(&t->take_at_threshold);
  return Compact(SelectedClassify{x, t}, PairWriter{x, index_base, idx, val}, n, take, capacity, s,
                 count, stream);
}

// One top-k: threshold, compaction, optional zeroing, all scratch from `ws`.
// The count goes to d_count, or to the workspace when d_count is null;
// *used_count says where.
cudaError_t SelectImpl(float* x, size_t n, size_t k, uint32_t index_base, uint32_t* idx, float* val,
                       ull* d_count, bool zero, Workspace* ws, cudaStream_t stream,
                       ull** used_count) {
  auto carve = [&](Carver& c, ThresholdScratch* ts, DeviceThreshold** thr, CompactScratch* cs,
                   ull** count) {
    *ts = TakeThresholdScratch(c);
    *thr = c.Take<DeviceThreshold>(1);
    *cs = TakeCompactScratch(c, n);
    *count = c.Take<ull>(1);
  };
  ThresholdScratch ts;
  DeviceThreshold* thr;
  CompactScratch cs;
  ull* own_count;
  Carver sizing(nullptr);
  carve(sizing, &ts, &thr, &cs, &own_count);
  GRADEX_CUDA_RETURN_IF_ERROR(ws->Reserve(sizing.bytes()));
  Carver c(static_cast<char*>(ws->data()));
  carve(c, &ts, &thr, &cs, &own_count);
  ull* count = d_count ? d_count : own_count;
  *used_count = count;
  const size_t capacity = k < n ? k : n;
  GRADEX_CUDA_RETURN_IF_ERROR(ThresholdImpl(x, n, k, thr, ts, stream));
  GRADEX_CUDA_RETURN_IF_ERROR(
      CompactSelectedImpl(x, n, thr, index_base, idx, val, capacity, cs, count, stream));
  if (zero && capacity > 0) {
    const unsigned blocks = HistBlocks(capacity);
    ZeroSelectedKernel<<<blocks, kHistThreads, 0, stream>>>(x, idx, index_base, count, capacity);
  }
  return cudaGetLastError();
}

}  // namespace
}  // namespace detail

using detail::ull;

cudaError_t FindTopKThreshold(const float* d_x, size_t n, size_t k, DeviceThreshold* d_threshold,
                              Workspace* ws, cudaStream_t stream) {
  detail::Carver sizing(nullptr);
  detail::TakeThresholdScratch(sizing);
  GRADEX_CUDA_RETURN_IF_ERROR(ws->Reserve(sizing.bytes()));
  detail::Carver c(static_cast<char*>(ws->data()));
  return detail::ThresholdImpl(d_x, n, k, d_threshold, detail::TakeThresholdScratch(c), stream);
}

cudaError_t CompactSelected(const float* d_x, size_t n, const DeviceThreshold* d_threshold,
                            uint32_t index_base, uint32_t* d_idx, float* d_val, size_t capacity,
                            uint64_t* d_count, size_t* h_count, Workspace* ws,
                            cudaStream_t stream) {
  detail::Carver sizing(nullptr);
  detail::TakeCompactScratch(sizing, n);
  sizing.Take<ull>(1);
  GRADEX_CUDA_RETURN_IF_ERROR(ws->Reserve(sizing.bytes()));
  detail::Carver c(static_cast<char*>(ws->data()));
  const detail::CompactScratch cs = detail::TakeCompactScratch(c, n);
  ull* own = c.Take<ull>(1);
  ull* count = d_count ? reinterpret_cast<ull*>(d_count) : own;
  GRADEX_CUDA_RETURN_IF_ERROR(detail::CompactSelectedImpl(d_x, n, d_threshold, index_base, d_idx,
                                                          d_val, capacity, cs, count, stream));
  return detail::FinishCount(reinterpret_cast<uint64_t*>(count), h_count, stream);
}

namespace {
cudaError_t SelectAndReport(float* d_x, size_t n, size_t k, uint32_t index_base, uint32_t* d_idx,
                            float* d_val, uint64_t* d_count, size_t* h_count, bool zero,
                            Workspace* ws, cudaStream_t stream) {
  ull* count = nullptr;
  GRADEX_CUDA_RETURN_IF_ERROR(detail::SelectImpl(d_x, n, k, index_base, d_idx, d_val,
                                                 reinterpret_cast<ull*>(d_count), zero, ws, stream,
                                                 &count));
  return detail::FinishCount(reinterpret_cast<uint64_t*>(count), h_count, stream);
}
}  // namespace

cudaError_t SelectTopK(const float* d_x, size_t n, size_t k, uint32_t index_base, uint32_t* d_idx,
                       float* d_val, uint64_t* d_count, size_t* h_count, Workspace* ws,
                       cudaStream_t stream) {
  // Not written: zero is false.
  return SelectAndReport(const_cast<float*>(d_x), n, k, index_base, d_idx, d_val, d_count, h_count,
                         /*zero=*/false, ws, stream);
}

cudaError_t SelectTopKAndZero(float* d_x, size_t n, size_t k, uint32_t index_base, uint32_t* d_idx,
                              float* d_val, uint64_t* d_count, size_t* h_count, Workspace* ws,
                              cudaStream_t stream) {
  return SelectAndReport(d_x, n, k, index_base, d_idx, d_val, d_count, h_count, /*zero=*/true, ws,
                         stream);
}

cudaError_t BlockTopK(float* d_x, const size_t* bounds, const size_t* k, size_t blocks,
                      uint32_t index_base, bool zero_selected, uint32_t* const* d_idx,
                      float* const* d_val, uint64_t* d_counts, size_t* h_counts, Workspace* ws,
                      cudaStream_t stream) {
  if (blocks == 0) return cudaSuccess;
  if (d_counts == nullptr) return cudaErrorInvalidValue;
  for (size_t b = 0; b < blocks; ++b) {
    const size_t len = bounds[b + 1] > bounds[b] ? bounds[b + 1] - bounds[b] : 0;
    ull* count = reinterpret_cast<ull*>(d_counts + b);
    if (len == 0 || k[b] == 0) {
      GRADEX_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(count, 0, sizeof(ull), stream));
      continue;
    }
    ull* used = nullptr;
    GRADEX_CUDA_RETURN_IF_ERROR(detail::SelectImpl(
        d_x + bounds[b], len, k[b], index_base + static_cast<uint32_t>(bounds[b]), d_idx[b],
        d_val[b], count, zero_selected, ws, stream, &used));
  }
  if (h_counts == nullptr) return cudaGetLastError();
  static_assert(sizeof(uint64_t) == sizeof(size_t), "64-bit host");
  GRADEX_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(h_counts, d_counts, blocks * sizeof(uint64_t),
                                              cudaMemcpyDeviceToHost, stream));
  return cudaStreamSynchronize(stream);
}

}  // namespace gradex::kernels::cuda
