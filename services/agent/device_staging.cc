#include "services/agent/device_staging.h"

#include <algorithm>
#include <atomic>

#include "absl/strings/str_cat.h"

#if GRADEX_AGENT_CUDA
#include <cuda_runtime_api.h>

#include <string>

#include "services/agent/cuda_driver.h"
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
