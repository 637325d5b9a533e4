#include "services/agent/stream_handover.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "services/agent/device_staging.h"

#if GRADEX_AGENT_CUDA
#include "services/agent/cuda_driver.h"
#endif

namespace gradex::agent {

#if GRADEX_AGENT_CUDA

absl::StatusOr<std::unique_ptr<StreamHandover>> StreamHandover::Record(uintptr_t stream,
                                                                       const void* data) {
  if (stream == 0 || DeviceStaging::HostCopiesForTesting()) return nullptr;
  std::string why;
  const Driver* driver = OpenDriver(&why);
  if (driver == nullptr) return absl::InvalidArgumentError(absl::StrCat("Memory::kDevice: ", why));
  KeepCurrentContext keep(driver);
  absl::StatusOr<PointerInfo> info = QueryPointer(*driver, data);
  if (!info.ok()) return info.status();
  auto* s = reinterpret_cast<cudaStream_t>(stream);
  std::unique_ptr<StreamHandover> h(new StreamHandover);
  if (info->ordinal >= 0) {
    if (cudaError_t e = cudaSetDevice(info->ordinal); e != cudaSuccess) {
      return CudaError(e, "selecting the bucket's device");
    }
    h->device_ = info->ordinal;
  }
  cudaEvent_t event = nullptr;
  if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) == cudaSuccess) {
    if (cudaEventRecord(event, s) == cudaSuccess) {
      h->event_ = event;
      return h;
    }
    cudaEventDestroy(event);
  }
  // A stream of another device (or an event that could not be made): the
  // trainer's thread waits for its stream here instead.
  cudaGetLastError();  // the failed record's error is not the caller's
  if (cudaError_t e = cudaStreamSynchronize(s); e != cudaSuccess) {
    return CudaError(e, "waiting for the trainer's stream");
  }
  return nullptr;
}

StreamHandover::~StreamHandover() {
  if (event_ == nullptr) return;
  std::string why;
  KeepCurrentContext keep(OpenDriver(&why));
  if (device_ >= 0) cudaSetDevice(device_);
  cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

absl::Status StreamHandover::Wait() {
  if (event_ == nullptr) return absl::OkStatus();
  std::string why;
  KeepCurrentContext keep(OpenDriver(&why));
  if (device_ >= 0) {
    if (cudaError_t e = cudaSetDevice(device_); e != cudaSuccess) {
      return CudaError(e, "selecting the bucket's device");
    }
  }
  if (cudaError_t e = cudaEventSynchronize(static_cast<cudaEvent_t>(event_)); e != cudaSuccess) {
    return CudaError(e, "waiting for the trainer's stream");
  }
  return absl::OkStatus();
}

#else

absl::StatusOr<std::unique_ptr<StreamHandover>> StreamHandover::Record(uintptr_t stream,
                                                                       const void*) {
  if (stream == 0 || DeviceStaging::HostCopiesForTesting()) return nullptr;
  return absl::UnimplementedError(
      "a CUDA stream was given, but this gradex was built without CUDA (GRADEX_CUDA=OFF or no "
      "nvcc)");
}

StreamHandover::~StreamHandover() = default;
absl::Status StreamHandover::Wait() { return absl::OkStatus(); }

#endif

}  // namespace gradex::agent
