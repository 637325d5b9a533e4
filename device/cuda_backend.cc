#include "device/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

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
// step allocates without a system call; Trim (a client's close) gives it
// back. Its bound is half the device's memory, a fixed fraction: about twice
// the fp32 model (residual and velocity) lives here, outside torch's caching
// allocator, and the trainer keeps the other half.
absl::StatusOr<std::shared_ptr<DevicePool>> DevicePool::Create(int device) {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaError_t e = cudaMemGetInfo(&free_bytes, &total_bytes); e != cudaSuccess) {
    return CudaError(e, "device memory size");
  }
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
  cudaStream_t release = nullptr;
  cudaEvent_t mark = nullptr;
  cudaError_t e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&release, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&mark, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    if (release != nullptr) cudaStreamDestroy(release);
    cudaMemPoolDestroy(pool);
    return CudaError(e, "memory pool setup");
  }
  return std::make_shared<DevicePool>(device, pool, release, mark, uint64_t{total_bytes} / 2);
}

DevicePool::~DevicePool() {
  OnDevice on(device_);
  if (!on.ok()) return;
  cudaStreamSynchronize(release_);
  cudaEventDestroy(mark_);
  cudaStreamDestroy(release_);
  cudaMemPoolDestroy(pool_);
}

void DevicePool::AddStream(cudaStream_t s) {
  absl::MutexLock lock(&mu_);
  streams_.push_back(s);
}

void DevicePool::RemoveStream(cudaStream_t s) {
  absl::MutexLock lock(&mu_);
  streams_.erase(std::remove(streams_.begin(), streams_.end(), s), streams_.end());
}

void DevicePool::Release(void* p) {
  OnDevice on(device_);
  if (!on.ok()) return;  // the runtime is going away (process exit): it frees the pool
  absl::MutexLock lock(&mu_);
  // The release stream waits for the point each live queue has reached (one
  // event, recorded again for each: a wait takes the record made before it).
  cudaError_t e = cudaSuccess;
  for (cudaStream_t s : streams_) {
    e = cudaEventRecord(mark_, s);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(release_, mark_, 0);
    if (e != cudaSuccess) break;
  }
  if (e == cudaSuccess) e = cudaFreeAsync(p, release_);
  if (e == cudaSuccess) return;
  // Only where the context is failing already: the whole device, then.
  cudaGetLastError();
  cudaDeviceSynchronize();
  cudaFreeAsync(p, release_);
}

PoolUse DevicePool::Use() {
  PoolUse use;
  use.limit = limit_;
  OnDevice on(device_);
  if (!on.ok()) return use;
  uint64_t v = 0;
  if (cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &v) == cudaSuccess) {
    use.held = v;
  }
  if (cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemCurrent, &v) == cudaSuccess) {
    use.used = v;
  }
  return use;
}

void DevicePool::Trim() {
  OnDevice on(device_);
  if (!on.ok()) return;
  // The releases queued so far first: what they free is then free to trim.
  cudaStreamSynchronize(release_);
  cudaMemPoolTrimTo(pool_, 0);
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
  PoolUse Pools() override;
  void Trim() override;

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

PoolUse CudaBackend::Pools() {
  std::vector<std::shared_ptr<DevicePool>> pools;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [device, pool] : pools_) pools.push_back(pool);
  }
  PoolUse all;
  for (const auto& pool : pools) {
    const PoolUse one = pool->Use();
    all.held += one.held;
    all.used += one.used;
    all.limit = all.limit == 0 ? one.limit : std::min(all.limit, one.limit);
  }
  return all;
}

void CudaBackend::Trim() {
  std::vector<std::shared_ptr<DevicePool>> pools;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [device, pool] : pools_) pools.push_back(pool);
  }
  for (const auto& pool : pools) pool->Trim();
}

}  // namespace

std::unique_ptr<Backend> MakeCudaBackend() { return std::make_unique<CudaBackend>(); }

}  // namespace gradex::device
