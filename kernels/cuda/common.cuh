// Internal to kernels/cuda: key helpers, the accumulation, scratch carving and the ordered
// compaction (count per tile, scan the tile counts, scatter) that every
// CUDA kernel producing COO shares.
#ifndef GRADEX_KERNELS_CUDA_COMMON_CUH_
#define GRADEX_KERNELS_CUDA_COMMON_CUH_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "kernels/cuda/sparse_cuda.h"

namespace gradex::kernels::cuda::detail {

using ull = unsigned long long;
static_assert(sizeof(ull) == sizeof(uint64_t), "counts are 64-bit");

constexpr uint32_t kInfKey = 0x7f800000u;  // keys above are NaN

#define GRADEX_CUDA_RETURN_IF_ERROR(expr) \
  do {                                    \
    const cudaError_t e_ = (expr);        \
    if (e_ != cudaSuccess) return e_;     \
  } while (0)

__device__ __forceinline__ uint32_t KeyOf(float v) { return __float_as_uint(v) & 0x7fffffffu; }

// The accumulation of kernels::Accumulate, rounded the same way (no FMA).
struct DevAcc {
  const float* g;
  float* u;
  float m;
};

__device__ __forceinline__ float Accumulated(float x, const DevAcc& a, size_t i) {
  float add = a.g[i];
  if (a.u != nullptr) {
    add = __fadd_rn(__fmul_rn(a.u[i], a.m), add);
    a.u[i] = add;
  }
  return __fadd_rn(x, add);
}

// Bump allocation of one Workspace: a sizing pass (base == nullptr) then a
// carving pass with the same calls.
class Carver {
 public:
  explicit Carver(char* base) : base_(base) {}
  template <typename T>
  T* Take(size_t count) {
    off_ = (off_ + 255) & ~size_t{255};
    T* p = base_ ? reinterpret_cast<T*>(base_ + off_) : nullptr;
    off_ += count * sizeof(T);
    return p;
  }
  size_t bytes() const { return off_ + 256; }

 private:
  char* base_;
  size_t off_ = 0;
};

inline cudaError_t FinishCount(const uint64_t* d_count, size_t* h_count, cudaStream_t stream) {
  GRADEX_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  if (h_count == nullptr) return cudaSuccess;
  uint64_t c = 0;
  GRADEX_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&c, d_count, sizeof c, cudaMemcpyDeviceToHost, stream));
  GRADEX_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  *h_count = static_cast<size_t>(c);
  return cudaSuccess;
}

// ---- Ordered compaction ----------------------------------------------------
// A classifier maps entry i to 0 (drop), 1 (keep) or 2 (tie: keep while
// fewer than `take` ties precede it). A writer stores entry i at output
// position pos. A tile is kTile consecutive entries, one block's. Entries
// are visited striped (TileEntry: per instruction a warp touches 32
// consecutive entries, so loads and the writer's stores coalesce); the scan
// that gives positions in index order runs on the blocked arrangement
// (thread t owns entries t*kItems.., consecutive), reached through shared
// memory. The counts are per tile, so any count kernel that visits a tile's
// entries (in any order) pairs with the scatter.
constexpr int kThreads = 256;
constexpr int kItems = 16;
constexpr size_t kTile = size_t{kThreads} * kItems;
constexpr int kScanThreads = 1024;

inline size_t NumTiles(size_t n) { return (n + kTile - 1) / kTile; }

// Entry j (0 <= j < kItems) of the calling thread in its block's tile, striped.
__device__ __forceinline__ size_t TileEntry(int j) {
  return size_t{blockIdx.x} * kTile + static_cast<size_t>(j) * kThreads + threadIdx.x;
}

template <typename Classify>
__global__ void __launch_bounds__(kThreads)
    CountTilesKernel(Classify cls, size_t n, ulonglong2* tile_counts) {
  uint32_t packed = 0;  // keeps << 16 | ties; a tile holds at most 4096 < 2^16
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const size_t i = TileEntry(j);
    if (i < n) {
      const int c = cls(i);
      packed += (static_cast<uint32_t>(c == 1) << 16) | static_cast<uint32_t>(c == 2);
    }
  }
  using Reduce = cub::BlockReduce<uint32_t, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const uint32_t sum = Reduce(tmp).Sum(packed);
  if (threadIdx.x == 0) tile_counts[blockIdx.x] = make_ulonglong2(sum >> 16, sum & 0xffffu);
}

// One block: exclusive scan of the tile counts; the total kept (keeps plus
// min(ties, take)) goes to *d_count.
// static: each .cu file gets its own copy (a non-template kernel in a header).
static __global__ void __launch_bounds__(kScanThreads)
    ScanTilesKernel(const ulonglong2* tile_counts, ulonglong2* tile_offsets, size_t tiles,
                    const ull* take, ull* d_count) {
  using Scan = cub::BlockScan<ull, kScanThreads>;
  __shared__ typename Scan::TempStorage tmp;
  ull run_keep = 0, run_tie = 0;
  for (size_t start = 0; start < tiles; start += kScanThreads) {
    const size_t i = start + threadIdx.x;
    const ulonglong2 c = i < tiles ? tile_counts[i] : make_ulonglong2(0, 0);
    ull pk, pt, tk, tt;
    Scan(tmp).ExclusiveSum(c.x, pk, tk);
    __syncthreads();
    Scan(tmp).ExclusiveSum(c.y, pt, tt);
    __syncthreads();
    if (i < tiles) tile_offsets[i] = make_ulonglong2(run_keep + pk, run_tie + pt);
    run_keep += tk;
    run_tie += tt;
  }
  if (threadIdx.x == 0) {
    const ull t = take ? *take : 0;
    *d_count = run_keep + (run_tie < t ? run_tie : t);
  }
}

// Shared-memory slot of position p of a tile: one word of padding every 32,
// so that neither arrangement's accesses conflict on banks.
__device__ __forceinline__ int Slot(int p) { return p + (p >> 5); }

// Classes are read striped, moved to the blocked arrangement for the scan,
// and each entry's rank in the tile (keeps << 16 | ties before it, in index
// order) moved back, so that entry TileEntry(j) is written by the thread
// that read it.
template <typename Classify, typename Writer>
__global__ void __launch_bounds__(kThreads)
    ScatterTilesKernel(Classify cls, Writer w, size_t n, const ulonglong2* tile_offsets,
                       const ull* take_ptr, size_t capacity) {
  __shared__ uint32_t stage[kTile + kTile / 32];  // classes, then ranks, at Slot(position)
  __shared__ typename cub::BlockScan<uint32_t, kThreads>::TempStorage scan_tmp;
  uint8_t cls_of[kItems];
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const size_t i = TileEntry(j);
    const int c = i < n ? cls(i) : 0;
    cls_of[j] = static_cast<uint8_t>(c);
    stage[Slot(j * kThreads + threadIdx.x)] = static_cast<uint32_t>(c);
  }
  __syncthreads();
  uint32_t rank[kItems];  // blocked: entries threadIdx.x * kItems + j
  uint32_t packed = 0;
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const uint32_t c = stage[Slot(threadIdx.x * kItems + j)];
    rank[j] = packed;
    packed += (static_cast<uint32_t>(c == 1) << 16) | static_cast<uint32_t>(c == 2);
  }
  uint32_t prefix;
  cub::BlockScan<uint32_t, kThreads>(scan_tmp).ExclusiveSum(packed, prefix);
  __syncthreads();  // every class read before the ranks overwrite them
#pragma unroll
  for (int j = 0; j < kItems; ++j) stage[Slot(threadIdx.x * kItems + j)] = prefix + rank[j];
  __syncthreads();
  const ulonglong2 off = tile_offsets[blockIdx.x];
  const ull take = take_ptr ? *take_ptr : 0;
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    if (cls_of[j] == 0) continue;
    const uint32_t r = stage[Slot(j * kThreads + threadIdx.x)];
    const ull keeps = off.x + (r >> 16);     // keeps before this entry
    const ull ties = off.y + (r & 0xffffu);  // ties before this entry
    if (cls_of[j] == 1) {
      const ull pos = keeps + (ties < take ? ties : take);
      if (pos < capacity) w(TileEntry(j), pos);
    } else if (ties < take) {
      const ull pos = keeps + ties;
      if (pos < capacity) w(TileEntry(j), pos);
    }
  }
}

struct CompactScratch {
  ulonglong2* tile_counts;
  ulonglong2* tile_offsets;
};

inline CompactScratch TakeCompactScratch(Carver& c, size_t n) {
  const size_t tiles = NumTiles(n) + 1;
  return {c.Take<ulonglong2>(tiles), c.Take<ulonglong2>(tiles)};
}

// A compaction of n entries' scratch from ws, and where its count goes: the
// caller's d_count, else a slot of the scratch.
inline cudaError_t ReserveCompact(Workspace* ws, size_t n, uint64_t* d_count, CompactScratch* cs,
                                  ull** count) {
  Carver sizing(nullptr);
  TakeCompactScratch(sizing, n);
  sizing.Take<ull>(1);
  GRADEX_CUDA_RETURN_IF_ERROR(ws->Reserve(sizing.bytes()));
  Carver c(static_cast<char*>(ws->data()));
  *cs = TakeCompactScratch(c, n);
  ull* own = c.Take<ull>(1);
  *count = d_count ? reinterpret_cast<ull*>(d_count) : own;
  return cudaSuccess;
}

// Runs the three phases; *d_count gets the full count.
template <typename Classify, typename Writer>
cudaError_t Compact(Classify cls, Writer w, size_t n, const ull* take, size_t capacity,
                    const CompactScratch& s, ull* d_count, cudaStream_t stream) {
  if (n == 0) return cudaMemsetAsync(d_count, 0, sizeof(ull), stream);
  const size_t tiles = NumTiles(n);
  if (tiles > 0x7fffffffu) return cudaErrorInvalidValue;
  CountTilesKernel<<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(cls, n, s.tile_counts);
  ScanTilesKernel<<<1, kScanThreads, 0, stream>>>(s.tile_counts, s.tile_offsets, tiles, take,
                                                  d_count);
  ScatterTilesKernel<<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(
      cls, w, n, s.tile_offsets, take, capacity);
  return cudaGetLastError();
}

// Keys in [lo, hi] kept.
struct RangeClassify {
  const float* x;
  uint32_t lo, hi;
  __device__ int operator()(size_t i) const {
    const uint32_t k = KeyOf(x[i]);
    return (k >= lo && k <= hi) ? 1 : 0;
  }
};

struct PairWriter {
  const float* x;
  uint32_t index_base;
  uint32_t* idx;
  float* val;
  __device__ void operator()(size_t i, ull pos) const {
    idx[pos] = index_base + static_cast<uint32_t>(i);
    val[pos] = x[i];
  }
};

}  // namespace gradex::kernels::cuda::detail

#endif  // GRADEX_KERNELS_CUDA_COMMON_CUH_
