// A device residual's own operations: the accumulation with its count of
// non-finite entries, the zeroing of those entries and of a COO's indices,
// and the sum of squares. One pass each; counts are block-reduced, then
// added (or min-ed) atomically, so the results do not depend on the order.
#include <cub/block/block_reduce.cuh>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/sparse_cuda.h"

namespace gradex::kernels::cuda {
namespace detail {
namespace {

constexpr int kOpThreads = 256;
constexpr unsigned kMaxOpBlocks = 65535u * 64u;

unsigned OpBlocks(size_t n) {
  const size_t b = (n + kOpThreads - 1) / kOpThreads;
  return static_cast<unsigned>(b < kMaxOpBlocks ? (b < 1 ? 1 : b) : kMaxOpBlocks);
}

__device__ __forceinline__ bool NonFinite(float v) { return KeyOf(v) >= kInfKey; }

struct MinOp {
  __device__ ull operator()(ull a, ull b) const { return a < b ? a : b; }
};

__global__ void __launch_bounds__(kOpThreads)
    AccumulateNonFiniteKernel(float* __restrict__ x, size_t n, DevAcc acc, ull* count) {
  ull c = 0;
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = Accumulated(x[i], acc, i);
    x[i] = v;
    c += NonFinite(v) ? 1 : 0;
  }
  using Reduce = cub::BlockReduce<ull, kOpThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const ull sum = Reduce(tmp).Sum(c);
  if (threadIdx.x == 0 && sum != 0) atomicAdd(count, sum);
}

// count_first = {0, n}: nothing zeroed yet, the first index "none".
__global__ void InitCountFirstKernel(ull* count_first, ull n) {
  count_first[0] = 0;
  count_first[1] = n;
}

__global__ void __launch_bounds__(kOpThreads)
    ZeroNonFiniteKernel(float* __restrict__ x, size_t n, ull* count_first) {
  ull c = 0;
  ull first = ~ull{0};
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    if (NonFinite(x[i])) {
      x[i] = 0.0f;
      ++c;
      if (i < first) first = i;
    }
  }
  using Reduce = cub::BlockReduce<ull, kOpThreads>;
  __shared__ typename Reduce::TempStorage tmp_sum;
  __shared__ typename Reduce::TempStorage tmp_min;
  const ull sum = Reduce(tmp_sum).Sum(c);
  const ull least = Reduce(tmp_min).Reduce(first, MinOp());
  if (threadIdx.x == 0 && sum != 0) {
    atomicAdd(&count_first[0], sum);
    atomicMin(&count_first[1], least);
  }
}

__global__ void ZeroAtKernel(const uint32_t* __restrict__ idx, size_t nnz, uint32_t index_base,
                             float* x) {
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < nnz; i += stride) {
    x[idx[i] - index_base] = 0.0f;
  }
}

// The sum of squares: per-block partial sums over a grid of at most
// kSumBlocks blocks, then one block adds the partials. For a given n the
// order is fixed, so the result is deterministic.
constexpr int kSumBlocks = 1024;

__global__ void __launch_bounds__(kOpThreads)
    SquaresPartialKernel(const float* __restrict__ x, size_t n, double* partial) {
  double s = 0.0;
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double v = x[i];
    s += v * v;
  }
  using Reduce = cub::BlockReduce<double, kOpThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const double sum = Reduce(tmp).Sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

__global__ void __launch_bounds__(kSumBlocks)
    SumPartialsKernel(const double* __restrict__ partial, unsigned count, double* out) {
  using Reduce = cub::BlockReduce<double, kSumBlocks>;
  __shared__ typename Reduce::TempStorage tmp;
  const double v = threadIdx.x < count ? partial[threadIdx.x] : 0.0;
  const double sum = Reduce(tmp).Sum(v);
  if (threadIdx.x == 0) *out = sum;
}

}  // namespace
}  // namespace detail

using detail::ull;

cudaError_t AccumulateCount(float* d_x, size_t n, const Accumulate& acc, uint64_t* d_count,
                            size_t* h_count, cudaStream_t stream) {
  if (d_count == nullptr || (n > 0 && acc.grad == nullptr)) return cudaErrorInvalidValue;
  ull* count = reinterpret_cast<ull*>(d_count);
  GRADEX_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(count, 0, sizeof(ull), stream));
  if (n > 0) {
    const detail::DevAcc dacc{acc.grad, acc.velocity, acc.momentum};
    detail::AccumulateNonFiniteKernel<<<detail::OpBlocks(n), detail::kOpThreads, 0, stream>>>(
        d_x, n, dacc, count);
  }
  return detail::FinishCount(d_count, h_count, stream);
}

cudaError_t ZeroNonFinite(float* d_x, size_t n, uint64_t* d_count_first, size_t* h_count,
                          size_t* h_first, cudaStream_t stream) {
  if (d_count_first == nullptr) return cudaErrorInvalidValue;
  ull* cf = reinterpret_cast<ull*>(d_count_first);
  detail::InitCountFirstKernel<<<1, 1, 0, stream>>>(cf, static_cast<ull>(n));
  if (n > 0) {
    detail::ZeroNonFiniteKernel<<<detail::OpBlocks(n), detail::kOpThreads, 0, stream>>>(d_x, n, cf);
  }
  GRADEX_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  if (h_count == nullptr && h_first == nullptr) return cudaSuccess;
  uint64_t host[2] = {0, 0};
  GRADEX_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(host, d_count_first, sizeof host, cudaMemcpyDeviceToHost, stream));
  GRADEX_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  if (h_count != nullptr) *h_count = static_cast<size_t>(host[0]);
  if (h_first != nullptr) *h_first = static_cast<size_t>(host[1]);
  return cudaSuccess;
}

cudaError_t ZeroAt(const uint32_t* d_idx, size_t nnz, uint32_t index_base, float* d_x,
                   cudaStream_t stream) {
  if (nnz == 0) return cudaSuccess;
  detail::ZeroAtKernel<<<detail::OpBlocks(nnz), detail::kOpThreads, 0, stream>>>(d_idx, nnz,
                                                                                 index_base, d_x);
  return cudaGetLastError();
}

cudaError_t SumOfSquares(const float* d_x, size_t n, double* d_out, double* h_out, Workspace* ws,
                         cudaStream_t stream) {
  auto carve = [](detail::Carver& c, double** partial, double** own) {
    *partial = c.Take<double>(detail::kSumBlocks);
    *own = c.Take<double>(1);
  };
  double* partial;
  double* own;
  detail::Carver sizing(nullptr);
  carve(sizing, &partial, &own);
  GRADEX_CUDA_RETURN_IF_ERROR(ws->Reserve(sizing.bytes()));
  detail::Carver c(static_cast<char*>(ws->data()));
  carve(c, &partial, &own);
  double* out = d_out != nullptr ? d_out : own;
  const size_t want = (n + detail::kOpThreads - 1) / detail::kOpThreads;
  const unsigned blocks = static_cast<unsigned>(
      want < 1 ? 1 : (want < size_t{detail::kSumBlocks} ? want : size_t{detail::kSumBlocks}));
  detail::SquaresPartialKernel<<<blocks, detail::kOpThreads, 0, stream>>>(d_x, n, partial);
  detail::SumPartialsKernel<<<1, detail::kSumBlocks, 0, stream>>>(partial, blocks, out);
  GRADEX_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  if (h_out == nullptr) return cudaSuccess;
  double v = 0.0;
  GRADEX_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&v, out, sizeof v, cudaMemcpyDeviceToHost, stream));
  GRADEX_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  *h_out = v;
  return cudaSuccess;
}

}  // namespace gradex::kernels::cuda
