#include "device/cuda_driver.h"

#include <dlfcn.h>

#include <mutex>

#include "absl/strings/str_cat.h"

namespace gradex::device {

absl::Status CudaError(cudaError_t e, const char* what) {
  cudaGetLastError();
  return absl::InternalError(absl::StrCat("CUDA ", what, ": ", cudaGetErrorString(e)));
}

const Driver* OpenDriver(std::string* why) {
  static Driver driver;
  static std::string failure;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      failure = absl::StrCat("no CUDA driver (", dlerror(), ")");
      return;
    }
    auto init = reinterpret_cast<CUresult (*)(unsigned int)>(dlsym(lib, "cuInit"));
    Driver d;
    d.get_attributes =
        reinterpret_cast<decltype(d.get_attributes)>(dlsym(lib, "cuPointerGetAttributes"));
    // cuda.h maps none of these names to a _v2 symbol: the plain names are
    // the ABI.
    d.get_current = reinterpret_cast<decltype(d.get_current)>(dlsym(lib, "cuCtxGetCurrent"));
    d.set_current = reinterpret_cast<decltype(d.set_current)>(dlsym(lib, "cuCtxSetCurrent"));
    if (init == nullptr || d.get_attributes == nullptr || d.get_current == nullptr ||
        d.set_current == nullptr) {
      failure = "the CUDA driver lacks cuInit, cuPointerGetAttributes or cuCtx{Get,Set}Current";
      return;
    }
    // Idempotent and makes no context; fails where there is no GPU.
    if (CUresult e = init(0); e != CUDA_SUCCESS) {
      failure = absl::StrCat("the CUDA driver did not initialise (cuInit: error ", e, ")");
      return;
    }
    driver = d;
  });
  if (driver.get_attributes == nullptr) {
    if (why != nullptr) *why = failure;
    return nullptr;
  }
  return &driver;
}

// cudaPointerGetAttributes would be the runtime's way, but on a thread that
// has not called cudaSetDevice it may initialise the thread's current
// device, 0 (its devicePointer field is relative to the current device, so
// the runtime needs that device's primary context): every rank of an 8-GPU
// node would open a context on GPU 0 from our threads. Asking on the
// trainer's thread instead would rely on that thread's current device being
// the memory's, which torch does not promise (it may leave the nominal
// device 0 current without a context). The driver API creates no context
// implicitly, and cuPointerGetAttributes needs no current one for the
// memory type and the device ordinal, so this is safe on any thread. libcuda
// is opened with dlopen (it is already loaded when the memory exists) so
// that a CUDA build still loads where no NVIDIA driver is installed.
absl::StatusOr<PointerInfo> QueryPointer(const Driver& driver, const void* p) {
  unsigned int type = 0;
  unsigned int managed = 0;  // the driver writes a bool into its low byte
  int ordinal = -1;
  CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  void* data[] = {&type, &managed, &ordinal};
  // A pointer CUDA does not know gets the attributes' zero values, not an
  // error (cuPointerGetAttributes, unlike cuPointerGetAttribute).
  if (CUresult e = driver.get_attributes(3, which, data, reinterpret_cast<CUdeviceptr>(p));
      e != CUDA_SUCCESS) {
    return absl::InvalidArgumentError(
        absl::StrCat("Memory::kDevice: not CUDA memory (cuPointerGetAttributes: error ", e, ")"));
  }
  PointerInfo info;
  info.managed = (managed & 0xff) != 0;
  info.device = type == CU_MEMORYTYPE_DEVICE || info.managed;
  info.ordinal = ordinal;
  return info;
}

OnDevice::OnDevice(int device) : keep_(OpenDriver(nullptr)) {
  if (device < 0) {
    status_ = absl::FailedPreconditionError("CUDA: no device named for the work");
  } else if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    status_ = CudaError(e, absl::StrCat("selecting device ", device).c_str());
  }
}

}  // namespace gradex::device
