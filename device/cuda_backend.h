// The CUDA backend of the device floor (device.h): non-blocking streams,
// events both ways with the trainer's streams, step memory from a per-device
// pool (cudaMallocFromPoolAsync, nothing given back to the driver between
// steps), whole-bucket staging through pinned memory, and the kernels of
// kernels/cuda. Every CUDA runtime or driver call outside kernels/ lives in
// this backend (cuda_backend.cc, cuda_driver.cc). Built with CUDA only
// (GRADEX_DEVICE_CUDA).
#ifndef GRADEX_DEVICE_CUDA_BACKEND_H_
#define GRADEX_DEVICE_CUDA_BACKEND_H_

#include <memory>

#include "device/device.h"

namespace gradex::device {

// A new CUDA backend. Making one touches no device: libcuda is opened (and
// Available() answers) at the first call that needs it.
std::unique_ptr<Backend> MakeCudaBackend();

}  // namespace gradex::device

#endif  // GRADEX_DEVICE_CUDA_BACKEND_H_
