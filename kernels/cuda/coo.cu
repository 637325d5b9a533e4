// COO operations on the GPU: merge-add of sorted runs, scatter-add,
// dense <-> sparse, compaction above a threshold.

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/sparse_cuda.h"

namespace gradex::kernels::cuda {
namespace detail {
namespace {

constexpr int kThreads1D = 256;

unsigned Blocks1D(size_t n) {
  const size_t b = (n + kThreads1D - 1) / kThreads1D;
  return static_cast<unsigned>(b < 65535 * 64 ? (b < 1 ? 1 : b) : 65535 * 64);
}

// Places each entry of a and b at its position in the stable merge (a before
// b on equal indices) by binary search in the other run.
__global__ void MergePlaceKernel(const uint32_t* __restrict__ ai, const float* __restrict__ av,
                                 size_t na, const uint32_t* __restrict__ bi,
                                 const float* __restrict__ bv, size_t nb, uint32_t* mk, float* mv) {
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t t = size_t{blockIdx.x} * blockDim.x + threadIdx.x; t < na + nb; t += stride) {
    const bool from_a = t < na;
    const size_t self = from_a ? t : t - na;
    const uint32_t key = from_a ? ai[self] : bi[self];
    const uint32_t* other = from_a ? bi : ai;
    size_t lo = 0, hi = from_a ? nb : na;
    // a: count of b < key; b: count of a <= key.
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      const bool go_right = from_a ? other[mid] < key : other[mid] <= key;
      if (go_right) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    const size_t pos = self + lo;
    mk[pos] = key;
    mv[pos] = from_a ? av[self] : bv[self];
  }
}

// First entry of each index in the merged run.
struct HeadClassify {
  const uint32_t* mk;
  __device__ int operator()(size_t i) const { return (i == 0 || mk[i] != mk[i - 1]) ? 1 : 0; }
};

// A head is alone or followed by its partner from b: value a, b, or a + b.
struct DedupWriter {
  const uint32_t* mk;
  const float* mv;
  size_t m;
  uint32_t* idx;
  float* val;
  __device__ void operator()(size_t i, ull pos) const {
    idx[pos] = mk[i];
    val[pos] = (i + 1 < m && mk[i + 1] == mk[i]) ? __fadd_rn(mv[i], mv[i + 1]) : mv[i];
  }
};

__global__ void ScatterAddKernel(const uint32_t* __restrict__ idx, const float* __restrict__ val,
                                 size_t nnz, uint32_t index_base, float scale, float* dense) {
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < nnz; i += stride) {
    float* d = dense + (idx[i] - index_base);
    // Rounded product, then rounded sum: what the CPU computes (no FMA).
    *d = __fadd_rn(*d, __fmul_rn(scale, val[i]));
  }
}

__global__ void ScatterSetKernel(const uint32_t* __restrict__ idx, const float* __restrict__ val,
                                 size_t nnz, uint32_t index_base, float* dense) {
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < nnz; i += stride) {
    dense[idx[i] - index_base] = val[i];
  }
}

// Compaction of keys in [lo, hi] with scratch and the count from ws.
cudaError_t CompactRange(const float* x, size_t n, uint32_t lo, uint32_t hi, uint32_t index_base,
                         uint32_t* idx, float* val, size_t capacity, uint64_t* d_count,
                         size_t* h_count, Workspace* ws, cudaStream_t stream) {
  CompactScratch cs;
  ull* count = nullptr;
  GRADEX_CUDA_RETURN_IF_ERROR(ReserveCompact(ws, n, d_count, &cs, &count));
  GRADEX_CUDA_RETURN_IF_ERROR(Compact(RangeClassify{x, lo, hi}, PairWriter{x, index_base, idx, val},
                                      n, nullptr, capacity, cs, count, stream));
  return FinishCount(reinterpret_cast<uint64_t*>(count), h_count, stream);
}

}  // namespace
}  // namespace detail

using detail::ull;

cudaError_t MergeAdd(const uint32_t* a_idx, const float* a_val, size_t na, const uint32_t* b_idx,
                     const float* b_val, size_t nb, uint32_t* out_idx, float* out_val,
                     uint64_t* d_count, size_t* h_count, Workspace* ws, cudaStream_t stream) {
  const size_t m = na + nb;
  auto carve = [&](detail::Carver& c, uint32_t** mk, float** mv, detail::CompactScratch* cs,
                   ull** own) {
    *mk = c.Take<uint32_t>(m);
    *mv = c.Take<float>(m);
    *cs = detail::TakeCompactScratch(c, m);
    *own = c.Take<ull>(1);
  };
  uint32_t* mk;
  float* mv;
  detail::CompactScratch cs;
  ull* own;
  detail::Carver sizing(nullptr);
  carve(sizing, &mk, &mv, &cs, &own);
  GRADEX_CUDA_RETURN_IF_ERROR(ws->Reserve(sizing.bytes()));
  detail::Carver c(static_cast<char*>(ws->data()));
  carve(c, &mk, &mv, &cs, &own);
  ull* count = d_count ? reinterpret_cast<ull*>(d_count) : own;
  if (m > 0) {
    detail::MergePlaceKernel<<<detail::Blocks1D(m), detail::kThreads1D, 0, stream>>>(
        a_idx, a_val, na, b_idx, b_val, nb, mk, mv);
  }
  GRADEX_CUDA_RETURN_IF_ERROR(detail::Compact(detail::HeadClassify{mk},
                                              detail::DedupWriter{mk, mv, m, out_idx, out_val}, m,
                                              nullptr, m, cs, count, stream));
  return detail::FinishCount(reinterpret_cast<uint64_t*>(count), h_count, stream);
}

cudaError_t ScatterAdd(const uint32_t* d_idx, const float* d_val, size_t nnz, uint32_t index_base,
                       float scale, float* d_dense, cudaStream_t stream) {
  if (nnz == 0) return cudaSuccess;
  detail::ScatterAddKernel<<<detail::Blocks1D(nnz), detail::kThreads1D, 0, stream>>>(
      d_idx, d_val, nnz, index_base, scale, d_dense);
  return cudaGetLastError();
}

cudaError_t DenseToSparse(const float* d_x, size_t n, uint32_t index_base, uint32_t* d_idx,
                          float* d_val, size_t capacity, uint64_t* d_count, size_t* h_count,
                          Workspace* ws, cudaStream_t stream) {
  return detail::CompactRange(d_x, n, 1u, 0x7fffffffu, index_base, d_idx, d_val, capacity, d_count,
                              h_count, ws, stream);
}

cudaError_t SparseToDense(const uint32_t* d_idx, const float* d_val, size_t nnz,
                          uint32_t index_base, float* d_dense, size_t n, cudaStream_t stream) {
  GRADEX_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(d_dense, 0, n * sizeof(float), stream));
  if (nnz == 0) return cudaSuccess;
  detail::ScatterSetKernel<<<detail::Blocks1D(nnz), detail::kThreads1D, 0, stream>>>(
      d_idx, d_val, nnz, index_base, d_dense);
  return cudaGetLastError();
}

cudaError_t CompactAbove(const float* d_x, size_t n, float threshold, uint32_t index_base,
                         uint32_t* d_idx, float* d_val, size_t capacity, uint64_t* d_count,
                         size_t* h_count, Workspace* ws, cudaStream_t stream) {
  return detail::CompactRange(d_x, n, CompactAboveKey(threshold), detail::kInfKey, index_base,
                              d_idx, d_val, capacity, d_count, h_count, ws, stream);
}

}  // namespace gradex::kernels::cuda
