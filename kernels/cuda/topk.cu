// The GPU top-k selection: the ordered compaction of what the threshold
// (topk_threshold.cu) selects, keeping the entries above it and the first
// `take_at_threshold` ties by index; SelectTopK, CompactSelected, BlockTopK.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/sparse_cuda.h"
#include "kernels/cuda/topk_internal.cuh"

namespace gradex::kernels::cuda {
namespace detail {
namespace {

cudaError_t CompactSelectedImpl(const float* x, size_t n, const DeviceThreshold* t,
                                uint32_t index_base, uint32_t* idx, float* val, size_t capacity,
                                const CompactScratch& s, ull* count, cudaStream_t stream) {
  static_assert(sizeof(DeviceThreshold) == 24, "layout shared with the device code");
  const ull* take = reinterpret_cast<const ull*>(&t->take_at_threshold);
  return Compact(SelectedClassify{x, t}, PairWriter{x, index_base, idx, val}, n, take, capacity, s,
                 count, stream);
}

}  // namespace

// One top-k: threshold, compaction, optional zeroing, all scratch from `ws`.
// The count goes to d_count, or to the workspace when d_count is null;
// *used_count says where. nonfinite as ThresholdImpl's (counted before the
// zeroing).
cudaError_t SelectImpl(float* x, size_t n, size_t k, uint32_t index_base, uint32_t* idx, float* val,
                       ull* d_count, bool zero, Workspace* ws, cudaStream_t stream,
                       ull** used_count, const DevAcc* acc, DeviceThreshold** used_thr,
                       ull* nonfinite) {
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

}  // namespace detail

using detail::ull;

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

}  // namespace gradex::kernels::cuda
