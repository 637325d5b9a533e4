#include "kernels/cuda/sparse_cuda.h"

namespace gradex::kernels::cuda {

Workspace::~Workspace() {
  if (data_ != nullptr) cudaFree(data_);
}

cudaError_t Workspace::Reserve(size_t bytes) {
  if (bytes <= size_) return cudaSuccess;
  // Grow by half again so that a slowly growing n does not reallocate often.
  const size_t want = bytes + bytes / 2;
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
