#include "services/agent/device_staging.h"

#include <algorithm>
#include <atomic>

#include "absl/strings/str_cat.h"

#if GRADEX_AGENT_CUDA
#include <cuda_runtime_api.h>
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
  }
  return "unknown";
}

void DeviceStaging::UseHostCopiesForTesting(bool on) { host_copies_for_testing.store(on); }

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
}  // namespace

bool DeviceStaging::Available() { return true; }

DeviceStaging::~DeviceStaging() {
  if (pinned_ != nullptr) cudaFreeHost(pinned_);
}

absl::StatusOr<std::span<float>> DeviceStaging::CudaToHost(std::span<const float> device) {
  cudaPointerAttributes attr{};
  if (cudaError_t e = cudaPointerGetAttributes(&attr, device.data()); e != cudaSuccess) {
    cudaGetLastError();  // clear it
    return absl::InvalidArgumentError(
        absl::StrCat("Memory::kDevice: not CUDA memory (", cudaGetErrorString(e), ")"));
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) {
    return absl::InvalidArgumentError("Memory::kDevice: the pointer is not device memory");
  }
  // Work on the memory's device, not this thread's default (device 0): a
  // rank of a multi-GPU node must open no context on its neighbours' GPUs.
  // Managed memory reports no single device (-1): keep the current one.
  if (attr.type == cudaMemoryTypeDevice && attr.device >= 0) {
    if (cudaError_t e = cudaSetDevice(attr.device); e != cudaSuccess) {
      return CudaError(e, "selecting the memory's device");
    }
    if (attr.device != device_) {
      // The pinned buffer belongs to the device it was allocated on.
      if (pinned_ != nullptr) cudaFreeHost(pinned_);
      pinned_ = nullptr;
      capacity_ = 0;
      device_ = attr.device;
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
