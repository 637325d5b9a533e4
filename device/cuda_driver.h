// The CUDA backend's few calls into the CUDA driver API (libcuda, opened with
// dlopen at run time so that a CUDA build still loads where no NVIDIA driver
// is installed), the error form of the runtime's codes, and the scope every
// call of the backend runs in. Built with CUDA only (GRADEX_DEVICE_CUDA).
#ifndef GRADEX_DEVICE_CUDA_DRIVER_H_
#define GRADEX_DEVICE_CUDA_DRIVER_H_

#include <cuda.h>  // the driver API's types only: libcuda is opened at run time
#include <cuda_runtime_api.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device/device.h"

namespace gradex::device {

// INTERNAL "CUDA <what>: <the runtime's error string>". Also clears the
// calling thread's last runtime error: it is reported here, and must not be
// found by the trainer's next launch check as if its own.
absl::Status CudaError(cudaError_t e, const char* what);

// libcuda's few entry points used here, opened once.
struct Driver {
  CUresult (*get_attributes)(unsigned int, CUpointer_attribute*, void**, CUdeviceptr) = nullptr;
  CUresult (*get_current)(CUcontext*) = nullptr;
  CUresult (*set_current)(CUcontext) = nullptr;
};

// The driver, or null with *why (may be null) set.
const Driver* OpenDriver(std::string* why);

// The device a pointer's memory belongs to, asked of the driver API: safe on
// any thread, it makes no context (see cuda_driver.cc).
absl::StatusOr<PointerInfo> QueryPointer(const Driver& driver, const void* p);

// Leaves the calling thread's current context as it found it (none
// included): the trainer's thread (its caller events, a pipeline destroyed
// there) keeps its device. A null driver does nothing.
class KeepCurrentContext {
 public:
  explicit KeepCurrentContext(const Driver* driver) : driver_(driver) {
    if (driver_ != nullptr && driver_->get_current(&saved_) != CUDA_SUCCESS) driver_ = nullptr;
  }
  ~KeepCurrentContext() {
    if (driver_ != nullptr) driver_->set_current(saved_);
  }
  KeepCurrentContext(const KeepCurrentContext&) = delete;
  KeepCurrentContext& operator=(const KeepCurrentContext&) = delete;

 private:
  const Driver* driver_;
  CUcontext saved_ = nullptr;
};

// For its scope, `device` is the calling thread's current device, and the
// thread's context is restored afterwards. Work always names its device: a
// thread that chose none would otherwise make device 0's context, and a rank
// of a multi-GPU node must open none on its neighbours' GPUs.
class OnDevice {
 public:
  explicit OnDevice(int device);
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;
  // Whether `device` could be made current.
  const absl::Status& status() const { return status_; }
  bool ok() const { return status_.ok(); }

 private:
  KeepCurrentContext keep_;
  absl::Status status_;
};

}  // namespace gradex::device

#endif  // GRADEX_DEVICE_CUDA_DRIVER_H_
