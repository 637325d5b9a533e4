// Top-k on the GPU: radix select on magnitude keys in three histogram passes
// (11/11/9 bits, the same buckets as the CPU). Pass 1 reads x (and, in the
// step kernels, accumulates the gradient into it first); pass 2 reads x again,
// counting the candidates of the pass-1 bucket and writing their keys to a
// buffer; pass 3 reads only that buffer (x again only when the bucket did not
// fit: many equal magnitudes). The choices stay on the device, so nothing
// synchronises with the host. Then the ordered compaction keeps the entries
// above the threshold and the first `take_at_threshold` ties by index.
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

// Keys of the pass-1 bucket gathered by pass 2 for pass 3: room for this
// many (a bucket holding more, e.g. all-equal data, makes pass 3 read x).
size_t CandidateCap(size_t n) {
  const size_t cap = n / 16 > 65536 ? n / 16 : 65536;
  return cap < n ? cap : n;
}

// Adds the block's sum of c to *total (null: nothing). Every thread of the
// block calls it.
template <int kBlock>
__device__ __forceinline__ void AddBlockCount(ull c, ull* total) {
  using Reduce = cub::BlockReduce<ull, kBlock>;
  __shared__ typename Reduce::TempStorage tmp;
  const ull sum = Reduce(tmp).Sum(c);
  if (threadIdx.x == 0 && sum != 0) atomicAdd(total, sum);
}

struct SelectState {
  uint32_t lo, hi;  // key range of the candidates for the next pass
  int active;       // 0: nothing to select
  ull need;         // entries still to take among the candidates
  ull above;        // entries above the candidates
};

// kAcc: x[i] is accumulated (and written back) before it is counted.
// nonfinite (may be null) gets the count of NaN and infinite entries added.
template <bool kAcc>
__global__ void __launch_bounds__(kHistThreads)
    Hist1Kernel(float* __restrict__ x, size_t n, DevAcc acc, ull* __restrict__ hist,
                ull* nonfinite) {
  __shared__ uint32_t h[kBuckets1];
  for (int b = threadIdx.x; b < kBuckets1; b += blockDim.x) h[b] = 0;
  __syncthreads();
  ull bad = 0;
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    float v = x[i];
    if (kAcc) {
      v = Accumulated(v, acc, i);
      x[i] = v;
    }
    const uint32_t key = KeyOf(v);
    bad += key >= kInfKey ? 1 : 0;
    atomicAdd(&h[(key + kBias1) >> kShift1], 1u);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < kBuckets1; b += blockDim.x) {
    if (h[b] != 0) atomicAdd(&hist[b], static_cast<ull>(h[b]));
  }
  if (nonfinite != nullptr) AddBlockCount<kHistThreads>(bad, nonfinite);
}

// Pass 2: histograms bits 19..9 of the keys in the pass-1 bucket [lo, hi]
// and appends those keys to cand (warp-aggregated; order does not matter for
// a histogram). *cand_count gets the full count, even past cap.
__global__ void __launch_bounds__(kHistThreads)
    Hist2GatherKernel(const float* __restrict__ x, size_t n, const SelectState* st,
                      ull* __restrict__ hist, uint32_t* __restrict__ cand, size_t cap,
                      ull* cand_count) {
  if (!st->active) return;
  const uint32_t lo = st->lo, hi = st->hi;
  __shared__ uint32_t h[kBuckets2];
  for (int b = threadIdx.x; b < kBuckets2; b += blockDim.x) h[b] = 0;
  __syncthreads();
  const unsigned lane = threadIdx.x & 31u;
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint32_t k = KeyOf(x[i]);
    const bool in = k >= lo && k <= hi;
    const unsigned hits = __ballot_sync(__activemask(), in);
    if (in) {
      atomicAdd(&h[(k - lo) >> 9], 1u);
      const int leader = __ffs(hits) - 1;
      ull base = 0;
      if (static_cast<int>(lane) == leader)
        base = atomicAdd(cand_count, static_cast<ull>(__popc(hits)));
      base = __shfl_sync(hits, base, leader);
      const ull pos = base + static_cast<ull>(__popc(hits & ((1u << lane) - 1u)));
      if (pos < cap) cand[pos] = k;
    }
  }
  __syncthreads();
  for (int b = threadIdx.x; b < kBuckets2; b += blockDim.x) {
    if (h[b] != 0) atomicAdd(&hist[b], static_cast<ull>(h[b]));
  }
}

// Pass 3: bits 8..0 of the keys in [lo, lo + 511], from the gathered keys
// when they all fit, else from x.
__global__ void __launch_bounds__(kHistThreads)
    Hist3Kernel(const float* __restrict__ x, size_t n, const SelectState* st,
                const uint32_t* __restrict__ cand, size_t cap, const ull* cand_count,
                ull* __restrict__ hist) {
  if (!st->active) return;
  const uint32_t lo = st->lo, hi = st->hi;
  const ull m = *cand_count;
  const bool gathered = m <= cap;
  const size_t len = gathered ? static_cast<size_t>(m) : n;
  __shared__ uint32_t h[kBuckets3];
  for (int b = threadIdx.x; b < kBuckets3; b += blockDim.x) h[b] = 0;
  __syncthreads();
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < len; i += stride) {
    const uint32_t k = gathered ? cand[i] : KeyOf(x[i]);
    if (k >= lo && k <= hi) atomicAdd(&h[k - lo], 1u);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < kBuckets3; b += blockDim.x) {
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
  ull* cand_count;
  SelectState* state;
  uint32_t* cand;
  size_t cap;
};

ThresholdScratch TakeThresholdScratch(Carver& c, size_t n) {
  // The three histograms and the candidate count are adjacent so that one
  // memset clears them.
  ull* h = c.Take<ull>(kBuckets1 + kBuckets2 + kBuckets3 + 1);
  ThresholdScratch s;
  s.hist1 = h;
  s.hist2 = h ? h + kBuckets1 : nullptr;
  s.hist3 = h ? h + kBuckets1 + kBuckets2 : nullptr;
  s.cand_count = h ? h + kBuckets1 + kBuckets2 + kBuckets3 : nullptr;
  s.state = c.Take<SelectState>(1);
  s.cap = CandidateCap(n);
  s.cand = c.Take<uint32_t>(s.cap);
  return s;
}

// acc (may be null) is accumulated into x by pass 1, which then writes x and
// adds the count of NaN and infinite entries (after the accumulation) to
// *nonfinite (may be null).
cudaError_t ThresholdImpl(float* x, size_t n, size_t k, const DevAcc* acc, DeviceThreshold* out,
                          const ThresholdScratch& s, cudaStream_t stream,
                          ull* nonfinite = nullptr) {
  if (n == 0 || k == 0) return cudaMemsetAsync(out, 0, sizeof *out, stream);
  GRADEX_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(s.hist1, 0, sizeof(ull) * (kBuckets1 + kBuckets2 + kBuckets3 + 1), stream));
  const unsigned blocks = HistBlocks(n);
  if (acc != nullptr) {
    Hist1Kernel<true><<<blocks, kHistThreads, 0, stream>>>(x, n, *acc, s.hist1, nonfinite);
  } else {
    Hist1Kernel<false><<<blocks, kHistThreads, 0, stream>>>(x, n, DevAcc{}, s.hist1, nonfinite);
  }
  SelectBinKernel<<<1, kSelectThreads, 0, stream>>>(s.hist1, 1, k, s.state, out);
  Hist2GatherKernel<<<blocks, kHistThreads, 0, stream>>>(x, n, s.state, s.hist2, s.cand, s.cap,
                                                         s.cand_count);
  SelectBinKernel<<<1, kSelectThreads, 0, stream>>>(s.hist2, 2, k, s.state, out);
  Hist3Kernel<<<blocks, kHistThreads, 0, stream>>>(x, n, s.state, s.cand, s.cap, s.cand_count,
                                                   s.hist3);
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
// *used_count says where. nonfinite as ThresholdImpl's (counted before the
// zeroing).
cudaError_t SelectImpl(float* x, size_t n, size_t k, uint32_t index_base, uint32_t* idx, float* val,
                       ull* d_count, bool zero, Workspace* ws, cudaStream_t stream,
                       ull** used_count, const DevAcc* acc = nullptr,
                       DeviceThreshold** used_thr = nullptr, ull* nonfinite = nullptr) {
  auto carve = [&](Carver& c, ThresholdScratch* ts, DeviceThreshold** thr, CompactScratch* cs,
                   ull** count) {
    *ts = TakeThresholdScratch(c, n);
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
  if (used_thr != nullptr) *used_thr = thr;
  const size_t capacity = k < n ? k : n;
  GRADEX_CUDA_RETURN_IF_ERROR(ThresholdImpl(x, n, k, acc, thr, ts, stream, nonfinite));
  GRADEX_CUDA_RETURN_IF_ERROR(
      CompactSelectedImpl(x, n, thr, index_base, idx, val, capacity, cs, count, stream));
  if (zero && capacity > 0) {
    const unsigned blocks = HistBlocks(capacity);
    ZeroSelectedKernel<<<blocks, kHistThreads, 0, stream>>>(x, idx, index_base, count, capacity);
  }
  return cudaGetLastError();
}

// ---- Step kernels ------------------------------------------------------------

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
  const size_t base = blockIdx.x * kTile + size_t{threadIdx.x} * kItems;
  uint32_t packed = 0;  // non-finite << 16 | candidates; a tile holds 4096 < 2^16
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    if (base + j < n) {
      float v = x[base + j];
      if (kAcc) {
        v = Accumulated(v, acc, base + j);
        x[base + j] = v;
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

cudaError_t FindTopKThreshold(const float* d_x, size_t n, size_t k, DeviceThreshold* d_threshold,
                              Workspace* ws, cudaStream_t stream) {
  detail::Carver sizing(nullptr);
  detail::TakeThresholdScratch(sizing, n);
  GRADEX_CUDA_RETURN_IF_ERROR(ws->Reserve(sizing.bytes()));
  detail::Carver c(static_cast<char*>(ws->data()));
  // Not written: no accumulation.
  return detail::ThresholdImpl(const_cast<float*>(d_x), n, k, nullptr, d_threshold,
                               detail::TakeThresholdScratch(c, n), stream);
}

cudaError_t CompactSelected(const float* d_x, size_t n, const DeviceThreshold* d_threshold,
                            uint32_t index_base, uint32_t* d_idx, float* d_val, size_t capacity,
                            uint64_t* d_count, size_t* h_count, Workspace* ws,
                            cudaStream_t stream) {
  detail::CompactScratch cs;
  ull* count = nullptr;
  GRADEX_CUDA_RETURN_IF_ERROR(detail::ReserveCompact(ws, n, d_count, &cs, &count));
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
