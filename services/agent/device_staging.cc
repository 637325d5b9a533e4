#include "services/agent/device_staging.h"

#include <algorithm>
#include <atomic>

#include "absl/strings/str_cat.h"

#if GRADEX_AGENT_CUDA
#include <cuda.h>  // the driver API's types only: libcuda is opened at run time
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <mutex>
#include <string>
#endif

namespace gradex::agent {
namespace {
std::atomic<bool> host_copies_for_testing{false};
}  // namespace

const char* DevicePathName(DevicePath path) {
  switch (path) {
    case DevicePath::kHost:
      return "host";
    case DevicePath::kWholeBucketStaging:
      return "whole-bucket staging";
    case DevicePath::kDeviceSelection:
      return "device selection";
  }
  return "unknown";
}

void DeviceStaging::UseHostCopiesForTesting(bool on) { host_copies_for_testing.store(on); }
bool DeviceStaging::HostCopiesForTesting() { return host_copies_for_testing.load(); }

absl::StatusOr<std::span<float>> DeviceStaging::ToHost(std::span<const float> device) {
  absl::StatusOr<std::span<float>> host;
  fake_used_ = host_copies_for_testing.load();
  if (fake_used_) {
    fake_.assign(device.begin(), device.end());
    host = std::span<float>(fake_);
  } else {
    host = CudaToHost(device);
  }
  if (host.ok()) to_host_bytes_ += device.size_bytes();
  return host;
}

absl::Status DeviceStaging::ToDevice(std::span<float> device) {
  absl::Status s;
  if (fake_used_) {
    if (device.size() > fake_.size()) return absl::InternalError("ToDevice before ToHost");
    std::copy_n(fake_.begin(), device.size(), device.begin());
  } else {
    s = CudaToDevice(device);
  }
  if (s.ok()) to_device_bytes_ += device.size_bytes();
  return s;
}

#if GRADEX_AGENT_CUDA

namespace {
absl::Status CudaError(cudaError_t e, const char* what) {
  return absl::InternalError(absl::StrCat("CUDA ", what, ": ", cudaGetErrorString(e)));
}

// libcuda's few entry points used here, opened once.
struct Driver {
  CUresult (*get_attributes)(unsigned int, CUpointer_attribute*, void**, CUdeviceptr) = nullptr;
  CUresult (*get_current)(CUcontext*) = nullptr;
  CUresult (*set_current)(CUcontext) = nullptr;
};

// The driver, or null with `why` set.
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
    *why = failure;
    return nullptr;
  }
  return &driver;
}

struct PointerInfo {
  bool device = false;  // device or managed memory
  bool managed = false;
  int ordinal = -1;
};

// The device a pointer's memory belongs to, asked of the driver API.
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

// Leaves the calling thread's current context as it found it (none
// included): the trainer's thread (Close stages the buckets it never ran,
// the pipeline's destruction frees the pinned buffers) keeps its device.
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
}  // namespace

bool DeviceStaging::Available() { return true; }

DeviceStaging::~DeviceStaging() {
  if (pinned_ == nullptr) return;
  std::string why;
  KeepCurrentContext keep(OpenDriver(&why));
  // On its own device: a thread without one would make device 0's context.
  if (device_ >= 0) cudaSetDevice(device_);
  cudaFreeHost(pinned_);
}

absl::StatusOr<std::span<float>> DeviceStaging::CudaToHost(std::span<const float> device) {
  std::string why;
  const Driver* driver = OpenDriver(&why);
  if (driver == nullptr) return absl::InvalidArgumentError(absl::StrCat("Memory::kDevice: ", why));
  KeepCurrentContext keep(driver);
  absl::StatusOr<PointerInfo> info = QueryPointer(*driver, device.data());
  if (!info.ok()) return info.status();
  if (!info->device) {
    return absl::InvalidArgumentError("Memory::kDevice: the pointer is not device memory");
  }
  if (!info->managed && info->ordinal < 0) {
    return absl::InternalError("Memory::kDevice: the CUDA driver names no device for the pointer");
  }
  // Work on the memory's device, never this thread's default (device 0): a
  // rank of a multi-GPU node must open no context on its neighbours' GPUs.
  // This is the thread's first CUDA runtime call for the bucket; the context
  // it makes current exists already (the memory lives in it).
  // Managed memory the driver ties to no device keeps the current one.
  if (info->ordinal >= 0) {
    if (cudaError_t e = cudaSetDevice(info->ordinal); e != cudaSuccess) {
      return CudaError(e, "selecting the memory's device");
    }
    if (info->ordinal != device_) {
      // The pinned buffer belongs to the device it was allocated on.
      if (pinned_ != nullptr) cudaFreeHost(pinned_);
      pinned_ = nullptr;
      capacity_ = 0;
      device_ = info->ordinal;
    }
  }
  if (device.size() > capacity_) {
    if (pinned_ != nullptr) cudaFreeHost(pinned_);
    pinned_ = nullptr;
    capacity_ = 0;
    void* p = nullptr;
    if (cudaError_t e = cudaMallocHost(&p, device.size() * sizeof(float)); e != cudaSuccess) {
      return CudaError(e, "pinned allocation");
    }
    pinned_ = static_cast<float*>(p);
    capacity_ = device.size();
  }
  if (cudaError_t e =
          cudaMemcpy(pinned_, device.data(), device.size_bytes(), cudaMemcpyDeviceToHost);
      e != cudaSuccess) {
    return CudaError(e, "copy to host");
  }
  return std::span<float>(pinned_, device.size());
}

absl::Status DeviceStaging::CudaToDevice(std::span<float> device) {
  if (device.size() > capacity_) return absl::InternalError("ToDevice before ToHost");
  std::string why;
  KeepCurrentContext keep(OpenDriver(&why));  // opened by ToHost
  if (device_ >= 0) {
    if (cudaError_t e = cudaSetDevice(device_); e != cudaSuccess) {
      return CudaError(e, "selecting the memory's device");
    }
  }
  if (cudaError_t e =
          cudaMemcpy(device.data(), pinned_, device.size_bytes(), cudaMemcpyHostToDevice);
      e != cudaSuccess) {
    return CudaError(e, "copy to device");
  }
  return absl::OkStatus();
}

#else

bool DeviceStaging::Available() { return false; }
DeviceStaging::~DeviceStaging() = default;

absl::StatusOr<std::span<float>> DeviceStaging::CudaToHost(std::span<const float>) {
  return absl::UnimplementedError(
      "Memory::kDevice: this gradex was built without CUDA (GRADEX_CUDA=OFF or no nvcc); pass "
      "host memory");
}
absl::Status DeviceStaging::CudaToDevice(std::span<float>) {
  return absl::UnimplementedError("Memory::kDevice: this gradex was built without CUDA");
}

#endif

}  // namespace gradex::agent
