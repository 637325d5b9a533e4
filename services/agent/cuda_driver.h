// The agent's few calls into the CUDA driver API (libcuda, opened with dlopen
// at run time so that a CUDA build still loads where no NVIDIA driver is
// installed) and the error form of the runtime's codes: shared by the whole
// bucket staging (device_staging.cc) and the device residuals
// (device_memory_cuda.cc). Built with CUDA only (GRADEX_AGENT_CUDA).
#ifndef GRADEX_SERVICES_AGENT_CUDA_DRIVER_H_
#define GRADEX_SERVICES_AGENT_CUDA_DRIVER_H_

#include <cuda.h>  // the driver API's types only: libcuda is opened at run time
#include <cuda_runtime_api.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gradex::agent {

// INTERNAL "CUDA <what>: <the runtime's error string>".
absl::Status CudaError(cudaError_t e, const char* what);

// libcuda's few entry points used here, opened once.
struct Driver {
  CUresult (*get_attributes)(unsigned int, CUpointer_attribute*, void**, CUdeviceptr) = nullptr;
  CUresult (*get_current)(CUcontext*) = nullptr;
  CUresult (*set_current)(CUcontext) = nullptr;
};

// The driver, or null with `why` set.
const Driver* OpenDriver(std::string* why);

struct PointerInfo {
  bool device = false;  // device or managed memory
  bool managed = false;
  int ordinal = -1;
};

// The device a pointer's memory belongs to, asked of the driver API: safe on
// any thread, it makes no context (see cuda_driver.cc).
absl::StatusOr<PointerInfo> QueryPointer(const Driver& driver, const void* p);

// Leaves the calling thread's current context as it found it (none
// included): the trainer's thread (Close stages the buckets it never ran,
// the pipeline's destruction frees the pinned buffers) keeps its device.
// A null driver does nothing.
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

}  // namespace gradex::agent

#endif  // GRADEX_SERVICES_AGENT_CUDA_DRIVER_H_
