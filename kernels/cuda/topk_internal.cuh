// Internal to kernels/cuda: what the GPU top-k's threshold (topk_threshold.cu),
// selection (topk.cu) and step kernels (topk_step.cu) share.
#ifndef GRADEX_KERNELS_CUDA_TOPK_INTERNAL_CUH_
#define GRADEX_KERNELS_CUDA_TOPK_INTERNAL_CUH_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cub/block/block_reduce.cuh>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/sparse_cuda.h"

namespace gradex::kernels::cuda::detail {

constexpr int kHistThreads = 512;

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

// static: each .cu file gets its own copy (a non-template kernel in a header).
static __global__ void ZeroSelectedKernel(float* x, const uint32_t* idx, uint32_t index_base,
                                          const ull* count, size_t capacity) {
  const ull c = *count < capacity ? *count : capacity;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < c;
       i += size_t{gridDim.x} * blockDim.x) {
    x[idx[i] - index_base] = 0.0f;
  }
}

// Blocks for a grid-stride pass over n entries (a few per SM).
unsigned HistBlocks(size_t n);

struct ThresholdScratch {
  ull* hist1;
  ull* hist2;
  ull* hist3;
  ull* cand_count;
  SelectState* state;
  uint32_t* cand;
  size_t cap;
};

// The threshold's scratch for n entries (sizing pass when c carves nothing).
ThresholdScratch TakeThresholdScratch(Carver& c, size_t n);

// acc (may be null) is accumulated into x by pass 1, which then writes x and
// adds the count of NaN and infinite entries (after the accumulation) to
// *nonfinite (may be null).
cudaError_t ThresholdImpl(float* x, size_t n, size_t k, const DevAcc* acc, DeviceThreshold* out,
                          const ThresholdScratch& s, cudaStream_t stream, ull* nonfinite = nullptr);

// One top-k: threshold, compaction, optional zeroing, all scratch from `ws`.
// The count goes to d_count, or to the workspace when d_count is null;
// *used_count says where. nonfinite as ThresholdImpl's (counted before the
// zeroing).
cudaError_t SelectImpl(float* x, size_t n, size_t k, uint32_t index_base, uint32_t* idx, float* val,
                       ull* d_count, bool zero, Workspace* ws, cudaStream_t stream,
                       ull** used_count, const DevAcc* acc = nullptr,
                       DeviceThreshold** used_thr = nullptr, ull* nonfinite = nullptr);

}  // namespace gradex::kernels::cuda::detail

#endif  // GRADEX_KERNELS_CUDA_TOPK_INTERNAL_CUH_
