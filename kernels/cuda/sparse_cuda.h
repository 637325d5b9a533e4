// CUDA versions of the kernels in kernels/sparse.h, over device pointers and
// a stream. They follow the same selection rule as the CPU kernels (zeros and
// NaN never selected, equal magnitudes: lower index wins, exactly
// min(k, selectable entries) kept), so CPU and GPU results are bitwise equal.
//
// Conventions: every function enqueues work on `stream` and returns the first
// CUDA error met (cudaSuccess otherwise). Counts land in device memory
// (`d_count`, may be null) and, when `h_count` is non-null, also on the host,
// which synchronises the stream. Outputs are written up to their capacity;
// the count reported is the full count, so count > capacity means "retry
// with more room". Scratch comes from a Workspace, which one stream at a time
// may use.
#ifndef GRADEX_KERNELS_CUDA_SPARSE_CUDA_H_
#define GRADEX_KERNELS_CUDA_SPARSE_CUDA_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/topk_step.h"

namespace gradex::kernels::cuda {

// Device-side twin of kernels::TopKThreshold.
struct DeviceThreshold {
  uint32_t threshold_key;  // 0 when nothing is selected
  uint32_t reserved;
  uint64_t take_at_threshold;  // entries with key == threshold_key to keep
  uint64_t count_above;        // entries with key > threshold_key
};

// Grow-only device scratch. Growing frees and reallocates: synchronously, or
// with a pool in `stream`'s order from the pool (no wait).
class Workspace {
 public:
  Workspace() = default;
  Workspace(cudaMemPool_t pool, cudaStream_t stream) : pool_(pool), stream_(stream) {}
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  cudaError_t Reserve(size_t bytes);
  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  cudaMemPool_t pool_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* data_ = nullptr;
  size_t size_ = 0;
};

// The threshold of the top-k of d_x[0, n) into *d_threshold (device memory).
cudaError_t FindTopKThreshold(const float* d_x, size_t n, size_t k, DeviceThreshold* d_threshold,
                              Workspace* ws, cudaStream_t stream);

// The entries selected by *d_threshold as sorted COO (indices + index_base).
cudaError_t CompactSelected(const float* d_x, size_t n, const DeviceThreshold* d_threshold,
                            uint32_t index_base, uint32_t* d_idx, float* d_val, size_t capacity,
                            uint64_t* d_count, size_t* h_count, Workspace* ws, cudaStream_t stream);

// FindTopKThreshold + CompactSelected; d_idx/d_val hold min(k, n) entries.
cudaError_t SelectTopK(const float* d_x, size_t n, size_t k, uint32_t index_base, uint32_t* d_idx,
                       float* d_val, uint64_t* d_count, size_t* h_count, Workspace* ws,
                       cudaStream_t stream);

// Same, and zeroes the selected entries of d_x (leaving the residual).
cudaError_t SelectTopKAndZero(float* d_x, size_t n, size_t k, uint32_t index_base, uint32_t* d_idx,
                              float* d_val, uint64_t* d_count, size_t* h_count, Workspace* ws,
                              cudaStream_t stream);

// The GPU twin of kernels::SelectTopKStep: accumulates *acc (device
// pointers; acc may be null) into d_x, selects the top-k exactly as
// SelectTopK, zeroes the selection when zero_selected, and with `reuse`
// (host state, the same policy as the CPU's, so both count the same hits and
// misses) gathers the candidates above the predicted threshold first. d_idx /
// d_val have room for min(k, n).
//
// *d_nonfinite (device; null: not counted, no extra work) is set to the
// number of NaN and infinite entries of d_x after the accumulation, before
// the zeroing: what the host form adds to its `nonfinite`. Without acc it is
// the count of d_x as it is (the host form counts nothing then). It is found
// by a pass that reads x anyway, except for k == 0 without acc (one pass).
//
// Synchronisation: with h_count null and reuse null (or n == 0 or k == 0)
// nothing synchronises the stream (a Workspace that grows aside), so the
// caller may read both counts with one copy: pass d_nonfinite = d_count + 1
// and copy the two (16 bytes) in one cudaMemcpyAsync. With reuse (n > 0,
// k > 0) it synchronises the stream itself, whatever h_count is: the
// candidate count and the new threshold are read on the host.
cudaError_t SelectTopKStep(float* d_x, size_t n, size_t k, uint32_t index_base,
                           const Accumulate* acc, ThresholdReuse* reuse, bool zero_selected,
                           uint32_t* d_idx, float* d_val, uint64_t* d_count, size_t* h_count,
                           Workspace* ws, cudaStream_t stream, uint64_t* d_nonfinite = nullptr);

// The GPU twin of kernels::CompactAboveStep (Ok-Topk's local selection at a
// reused threshold): accumulates *acc (device pointers; may be null) into
// d_x and compacts CompactAbove's entries in the same pass (a count pass
// that accumulates, then the ordered scatter). As every compaction here,
// writes up to `capacity` and reports the full count.
cudaError_t CompactAboveStep(float* d_x, size_t n, const Accumulate* acc, float threshold,
                             uint32_t index_base, uint32_t* d_idx, float* d_val, size_t capacity,
                             uint64_t* d_count, size_t* h_count, Workspace* ws,
                             cudaStream_t stream);

// Per-block top-k: block b is d_x[bounds[b], bounds[b+1]) (host arrays,
// blocks + 1 bounds), keeps k[b] entries into d_idx[b]/d_val[b] (host arrays
// of device pointers, room for min(k[b], block length) each), with global
// indices index_base + offset. d_counts (device, `blocks` entries) is
// required; h_counts (host) optional.
cudaError_t BlockTopK(float* d_x, const size_t* bounds, const size_t* k, size_t blocks,
                      uint32_t index_base, bool zero_selected, uint32_t* const* d_idx,
                      float* const* d_val, uint64_t* d_counts, size_t* h_counts, Workspace* ws,
                      cudaStream_t stream);

// BlockTopK as kernels::BlockTopKStep without reuse (topk_step.cu): block b
// = d_x[bounds[b], bounds[b+1]) accumulates its span of *acc (device
// pointers indexed like d_x; acc may be null) and keeps k[b] entries at
// d_idx/d_val + offsets[b] (host array; room min(k[b], length) each), with
// indices offset by bounds[b]; d_counts (device, `blocks` entries) gets the
// counts and *d_nonfinite (device; may be null) the NaN and infinite entries
// of every block after the accumulation. Nothing synchronises the stream.
cudaError_t BlockTopKStep(float* d_x, const size_t* bounds, const size_t* k, size_t blocks,
                          const Accumulate* acc, bool zero_selected, uint32_t* d_idx, float* d_val,
                          const size_t* offsets, uint64_t* d_counts, uint64_t* d_nonfinite,
                          Workspace* ws, cudaStream_t stream);

// out = a + b over the union of indices (both sorted, unique); exact-zero
// sums stay. out has room for na + nb entries.
cudaError_t MergeAdd(const uint32_t* a_idx, const float* a_val, size_t na, const uint32_t* b_idx,
                     const float* b_val, size_t nb, uint32_t* out_idx, float* out_val,
                     uint64_t* d_count, size_t* h_count, Workspace* ws, cudaStream_t stream);

// dense[idx[i] - index_base] += scale * val[i] (product rounded, no FMA).
cudaError_t ScatterAdd(const uint32_t* d_idx, const float* d_val, size_t nnz, uint32_t index_base,
                       float scale, float* d_dense, cudaStream_t stream);

// Nonzeros (NaN included) of d_x as COO.
cudaError_t DenseToSparse(const float* d_x, size_t n, uint32_t index_base, uint32_t* d_idx,
                          float* d_val, size_t capacity, uint64_t* d_count, size_t* h_count,
                          Workspace* ws, cudaStream_t stream);

// Zeroes d_dense[0, n) and writes the entries in.
cudaError_t SparseToDense(const uint32_t* d_idx, const float* d_val, size_t nnz,
                          uint32_t index_base, float* d_dense, size_t n, cudaStream_t stream);

// Entries with |x| >= threshold and x != 0 (threshold <= 0: every nonzero,
// NaN threshold: none), as in kernels::CompactAbove.
cudaError_t CompactAbove(const float* d_x, size_t n, float threshold, uint32_t index_base,
                         uint32_t* d_idx, float* d_val, size_t capacity, uint64_t* d_count,
                         size_t* h_count, Workspace* ws, cudaStream_t stream);

// ---- A device residual's own operations (kernels/sparse.h's and
// kernels/topk_step.h's twins, bit for bit but for SumOfSquares' order).

// kernels::AccumulateInto's arithmetic (acc.grad and acc.velocity, which may
// be null, are device pointers), then *d_count (required, device) = the
// number of NaN and infinite entries of d_x afterwards.
cudaError_t AccumulateCount(float* d_x, size_t n, const Accumulate& acc, uint64_t* d_count,
                            size_t* h_count, cudaStream_t stream);

// kernels::ZeroNonFinite: d_count_first (required, device, two entries) gets
// the count of NaN and infinite entries zeroed and the first one's index (n
// when there is none); h_count and h_first (each may be null) copy them to
// the host.
cudaError_t ZeroNonFinite(float* d_x, size_t n, uint64_t* d_count_first, size_t* h_count,
                          size_t* h_first, cudaStream_t stream);

// kernels::ZeroAt: d_x[d_idx[i] - index_base] = 0 for every i < nnz.
cudaError_t ZeroAt(const uint32_t* d_idx, size_t nnz, uint32_t index_base, float* d_x,
                   cudaStream_t stream);

// The sum of d_x's squares in double, in a fixed order for a given n (not
// the host's index order). d_out (device) and h_out may each be null.
cudaError_t SumOfSquares(const float* d_x, size_t n, double* d_out, double* h_out, Workspace* ws,
                         cudaStream_t stream);

}  // namespace gradex::kernels::cuda

#endif  // GRADEX_KERNELS_CUDA_SPARSE_CUDA_H_
