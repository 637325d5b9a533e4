// The GPU top-k threshold: the radix select's histogram and bin-choosing
// kernels with their launches (ThresholdImpl, FindTopKThreshold).
//
// Top-k on the GPU: radix select on magnitude keys in three histogram passes
// (11/11/9 bits, the same buckets as the CPU). Pass 1 reads x (and, in the
// step kernels, accumulates the gradient into it first); pass 2 reads x again,
// counting the candidates of the pass-1 bucket and writing their keys to a
// buffer; pass 3 reads only that buffer (x again only when the bucket did not
// fit: many equal magnitudes). The choices stay on the device, so nothing
// synchronises with the host. Then the ordered compaction keeps the entries
// above the threshold and the first `take_at_threshold` ties by index.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/sparse_cuda.h"
#include "kernels/cuda/topk_internal.cuh"

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
constexpr int kSelectThreads = 1024;
constexpr int kSelectItems = 2;  // kSelectThreads * kSelectItems >= every bucket count

// Keys of the pass-1 bucket gathered by pass 2 for pass 3: room for this
// many (a bucket holding more, e.g. all-equal data, makes pass 3 read x).
size_t CandidateCap(size_t n) {
  const size_t cap = n / 16 > 65536 ? n / 16 : 65536;
  return cap < n ? cap : n;
}

// Loads in flight per thread in pass 1, the one pass that reads all of x (and
// the gradient and velocity): a grid of one resident wave needs several per
// thread to cover the memory latency.
constexpr int kHist1Unroll = 4;

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
  auto count = [&](float v) {
    const uint32_t key = KeyOf(v);
    bad += key >= kInfKey ? 1 : 0;
    atomicAdd(&h[(key + kBias1) >> kShift1], 1u);
  };
  size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  // Every load of a round is issued before any use (each warp's coalesced).
  for (; i + (kHist1Unroll - 1) * stride < n; i += kHist1Unroll * stride) {
    float v[kHist1Unroll], g[kHist1Unroll], u[kHist1Unroll];
#pragma unroll
    for (int r = 0; r < kHist1Unroll; ++r) {
      v[r] = x[i + r * stride];
      if (kAcc) {
        g[r] = acc.g[i + r * stride];
        if (acc.u != nullptr) u[r] = acc.u[i + r * stride];
      }
    }
#pragma unroll
    for (int r = 0; r < kHist1Unroll; ++r) {
      if (kAcc) {
        // Accumulated's arithmetic, on the loaded values (no FMA).
        float add = g[r];
        if (acc.u != nullptr) {
          add = __fadd_rn(__fmul_rn(u[r], acc.m), add);
          acc.u[i + r * stride] = add;
        }
        v[r] = __fadd_rn(v[r], add);
        x[i + r * stride] = v[r];
      }
      count(v[r]);
    }
  }
  for (; i < n; i += stride) {
    float v = x[i];
    if (kAcc) {
      v = Accumulated(v, acc, i);
      x[i] = v;
    }
    count(v);
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

}  // namespace

// One resident wave: as many blocks as the device's SMs hold at once (its
// threads per SM over kHistThreads; 4 on an H100, 3 where an SM holds 1536
// threads), never a fixed count. More blocks would only queue behind the wave
// and add their shared-histogram clears and flushes; the loads in flight come
// from each thread's unrolled reads (pass 1).
unsigned HistBlocks(size_t n) {
  int dev = 0, sms = 1, per_sm = kHistThreads;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, dev) != cudaSuccess) {
    cudaGetLastError();
    sms = 1;
    per_sm = kHistThreads;
  }
  const size_t resident =
      static_cast<size_t>(per_sm / kHistThreads > 0 ? per_sm / kHistThreads : 1);
  const size_t want = (n + kHistThreads - 1) / kHistThreads;
  const size_t cap = static_cast<size_t>(sms) * resident;
  return static_cast<unsigned>(want < 1 ? 1 : (want < cap ? want : cap));
}

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
                          const ThresholdScratch& s, cudaStream_t stream, ull* nonfinite) {
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

}  // namespace detail

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

}  // namespace gradex::kernels::cuda
