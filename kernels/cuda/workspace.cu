#include "kernels/cuda/sparse_cuda.h"

namespace gradex::kernels::cuda {

Workspace::~Workspace() {
  if (data_ == nullptr) return;
  if (pool_ != nullptr) {
    cudaFreeAsync(data_, stream_);
  } else {
    cudaFree(data_);
  }
}

cudaError_t Workspace::Reserve(size_t bytes) {
  if (bytes <= size_) return cudaSuccess;
  // Grow by half again (at least doubling) so that a slowly growing n does
  // not reallocate often.
  const size_t want = bytes + bytes / 2 > 2 * size_ ? bytes + bytes / 2 : 2 * size_;
  if (pool_ != nullptr) {
    // Stream-ordered: the work queued before still reads the old buffer.
    if (data_ != nullptr) cudaFreeAsync(data_, stream_);
    data_ = nullptr;
    size_ = 0;
    const cudaError_t e = cudaMallocFromPoolAsync(&data_, want, pool_, stream_);
    if (e != cudaSuccess) {
      data_ = nullptr;
      return e;
    }
    size_ = want;
    return cudaSuccess;
  }
  if (data_ != nullptr) {
    // cudaFree waits for the device, so work still using the old buffer ends first.
    const cudaError_t e = cudaFree(data_);
    data_ = nullptr;
    size_ = 0;
    if (e != cudaSuccess) return e;
  }
  const cudaError_t e = cudaMalloc(&data_, want);
  if (e != cudaSuccess) {
    data_ = nullptr;
    return e;
  }
  size_ = want;
  return cudaSuccess;
}

}  // namespace gradex::kernels::cuda
