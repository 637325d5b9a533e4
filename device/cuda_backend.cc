#include "device/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "device/capture.h"
#include "device/cuda_driver.h"
#include "device/cuda_queue.h"

namespace gradex::device {

CudaEvent::~CudaEvent() {
  if (event == nullptr) return;
  OnDevice on(device);
  if (on.ok()) cudaEventDestroy(event);
}

absl::StatusOr<std::shared_ptr<CudaEvent>> NewEvent(int device) {
  cudaEvent_t e = nullptr;
  if (cudaError_t err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming); err != cudaSuccess) {
    return CudaError(err, "event creation");
  }
  return std::make_shared<CudaEvent>(e, device);
}

// A pool of our own rather than the device's default one: that one is the
// process's (torch's cudaMallocAsync allocator tunes it). Nothing is given
// back to the driver between steps (release threshold: never), so a steady
// step allocates without a system call.
absl::StatusOr<std::shared_ptr<DevicePool>> DevicePool::Create(int device) {
  cudaMemPoolProps props;
  std::memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  if (cudaError_t e = cudaMemPoolCreate(&pool, &props); e != cudaSuccess) {
    return CudaError(e, "memory pool creation");
  }
  uint64_t keep = std::numeric_limits<uint64_t>::max();
  if (cudaError_t e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
      e != cudaSuccess) {
    cudaMemPoolDestroy(pool);
    return CudaError(e, "memory pool release threshold");
  }
  return std::make_shared<DevicePool>(device, pool);
}

DevicePool::~DevicePool() {
  OnDevice on(device_);
  if (on.ok()) cudaMemPoolDestroy(pool_);
}

namespace {

// A caller's stream handle; 0 is the legacy default stream (torch's
// default), whatever default-stream mode this file was compiled in.
cudaStream_t CallerStream(uintptr_t stream) {
  return stream == 0 ? cudaStreamLegacy : reinterpret_cast<cudaStream_t>(stream);
}

class CudaBackend : public Backend {
 public:
  const char* name() const override { return "cuda"; }
  absl::Status Available() const override;
  absl::StatusOr<PointerInfo> Classify(const void* p) override;
  absl::StatusOr<std::unique_ptr<Queue>> NewQueue(const void* data) override;
  absl::StatusOr<std::shared_ptr<Event>> RecordCaller(uintptr_t stream, const void* data) override;
  absl::Status CallerWaits(uintptr_t stream, const Event& e) override;

 private:
  // The device of `data`, which must be device memory tied to one device.
  absl::StatusOr<int> DeviceOf(const void* data);
  // The device's pool, made at its first queue; `device` is current.
  absl::StatusOr<std::shared_ptr<DevicePool>> PoolOf(int device);

  absl::Mutex mu_;
  std::map<int, std::shared_ptr<DevicePool>> pools_ ABSL_GUARDED_BY(mu_);
};

absl::Status CudaBackend::Available() const {
  std::string why;
  if (OpenDriver(&why) == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("Memory::kDevice: ", why,
                     ": device memory needs the NVIDIA driver and a GPU; pass host memory"));
  }
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("Memory::kDevice: the CUDA runtime finds no usable GPU (",
                     cudaGetErrorString(e), "): update the NVIDIA driver, or pass host memory"));
  }
  if (count == 0) {
    return absl::FailedPreconditionError(
        "Memory::kDevice: the CUDA driver sees no GPU (check CUDA_VISIBLE_DEVICES), or pass "
        "host memory");
  }
  return absl::OkStatus();
}

absl::StatusOr<PointerInfo> CudaBackend::Classify(const void* p) {
  if (p == nullptr) return absl::InvalidArgumentError("Memory::kDevice: a null pointer");
  std::string why;
  const Driver* driver = OpenDriver(&why);
  if (driver == nullptr) return absl::InvalidArgumentError(absl::StrCat("Memory::kDevice: ", why));
  return QueryPointer(*driver, p);
}

absl::StatusOr<int> CudaBackend::DeviceOf(const void* data) {
  absl::StatusOr<PointerInfo> info = Classify(data);
  if (!info.ok()) return info.status();
  if (!info->device) {
    return absl::InvalidArgumentError("Memory::kDevice: the pointer is not device memory");
  }
  if (info->ordinal < 0) {
    return absl::InvalidArgumentError(
        "Memory::kDevice: the CUDA driver names no device for the pointer (managed memory tied "
        "to no device cannot hold device residuals)");
  }
  return info->ordinal;
}

absl::StatusOr<std::shared_ptr<DevicePool>> CudaBackend::PoolOf(int device) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<DevicePool>& pool = pools_[device];
  if (pool == nullptr) {
    absl::StatusOr<std::shared_ptr<DevicePool>> made = DevicePool::Create(device);
    if (!made.ok()) return made.status();
    pool = *std::move(made);
  }
  return pool;
}

absl::StatusOr<std::unique_ptr<Queue>> CudaBackend::NewQueue(const void* data) {
  absl::StatusOr<int> device = DeviceOf(data);
  if (!device.ok()) return device.status();
  // The memory's device, never this thread's default (device 0); its context
  // exists already (the memory lives in it).
  OnDevice on(*device);
  if (!on.ok()) return on.status();
  absl::StatusOr<std::shared_ptr<DevicePool>> pool = PoolOf(*device);
  if (!pool.ok()) return pool.status();
  return NewCudaQueue(*std::move(pool));
}

absl::StatusOr<std::shared_ptr<Event>> CudaBackend::RecordCaller(uintptr_t stream,
                                                                 const void* data) {
  absl::StatusOr<int> device = DeviceOf(data);
  if (!device.ok()) return device.status();
  OnDevice on(*device);
  if (!on.ok()) return on.status();
  const cudaStream_t s = CallerStream(stream);
  // Before anything is recorded on the trainer's stream (capture.h).
  if (absl::Status capture = RefuseCapture(s); !capture.ok()) return capture;
  absl::StatusOr<std::shared_ptr<CudaEvent>> event = NewEvent(*device);
  if (!event.ok()) return event.status();
  if (cudaEventRecord((*event)->event, s) == cudaSuccess) {
    return std::shared_ptr<Event>(*std::move(event));
  }
  // A stream of another device: the caller's thread waits for its stream
  // here instead, and the point is passed already. The failed record's error
  // is not the trainer's.
  cudaGetLastError();
  if (cudaError_t e = cudaStreamSynchronize(s); e != cudaSuccess) {
    return CudaError(e, "waiting for the caller's stream");
  }
  return std::make_shared<CudaEvent>(nullptr, *device);
}

absl::Status CudaBackend::CallerWaits(uintptr_t stream, const Event& e) {
  const auto* event = dynamic_cast<const CudaEvent*>(&e);
  if (event == nullptr) return absl::InvalidArgumentError("CUDA backend: not a CUDA event");
  if (event->event == nullptr) return absl::OkStatus();
  // The event's device, so that 0 names that device's legacy stream.
  OnDevice on(event->device);
  if (!on.ok()) return on.status();
  if (cudaError_t err = cudaStreamWaitEvent(CallerStream(stream), event->event, 0);
      err != cudaSuccess) {
    return CudaError(err, "the caller's stream waiting for an event");
  }
  return absl::OkStatus();
}

}  // namespace

std::unique_ptr<Backend> MakeCudaBackend() { return std::make_unique<CudaBackend>(); }

}  // namespace gradex::device
