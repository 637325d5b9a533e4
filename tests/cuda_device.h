// The GPU tests' skip: a test ends as skipped only where there is no GPU to
// test on (no CUDA driver installed, or a driver that sees no device), naming
// why. Any other CUDA error (a driver older than the runtime needs, a broken
// installation) fails the test instead: on a GPU machine a skip would pass
// for a success. Include after <cuda_runtime_api.h> and <gtest/gtest.h>.
//
// A skip's message starts with a fixed prefix that scripts/gpu-check reads:
// "gradex-skip: no device: " (no GPU, no driver: a failure on a GPU machine)
// or "gradex-skip: needs N GPUs, found M" (honest on a machine of M GPUs).
#ifndef GRADEX_TESTS_CUDA_DEVICE_H_
#define GRADEX_TESTS_CUDA_DEVICE_H_

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>

namespace gradex::test_device {

inline constexpr char kSkipNoDevice[] = "gradex-skip: no device: ";

// The skip message of a test that needs `need` GPUs where `found` are.
inline std::string NeedsGpus(int need, int found) {
  return std::string("gradex-skip: needs ") + std::to_string(need) + " GPUs, found " +
         std::to_string(found);
}

// Empty when a CUDA device is usable; else why not. *skip says whether that
// means "no GPU here" (skip) rather than a fault (fail).
inline std::string CudaDeviceProblem(bool* skip) {
  *skip = false;
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaSuccess && count > 0) return "";
  if (e == cudaSuccess || e == cudaErrorNoDevice) {
    *skip = true;
    return "no CUDA device: the driver sees none";
  }
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);  // 0 when no driver is installed
  cudaRuntimeGetVersion(&runtime);
  const std::string what = std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
  if (e == cudaErrorInsufficientDriver && driver == 0) {
    // What the runtime reports where no driver is installed at all.
    *skip = true;
    return "no CUDA device: no CUDA driver is installed";
  }
  if (e == cudaErrorInsufficientDriver) {
    return what + ": the driver (CUDA " + std::to_string(driver / 1000) + "." +
           std::to_string(driver % 1000 / 10) + ") is older than this CUDA runtime (" +
           std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10) +
           ") needs: update the NVIDIA driver";
  }
  return what + " from cudaGetDeviceCount: CUDA is installed but cannot use the device";
}

}  // namespace gradex::test_device

#define SKIP_WITHOUT_DEVICE()                                                  \
  do {                                                                         \
    bool skip_ = false;                                                        \
    const std::string why_ = ::gradex::test_device::CudaDeviceProblem(&skip_); \
    if (!why_.empty() && skip_) {                                              \
      GTEST_SKIP() << ::gradex::test_device::kSkipNoDevice << why_;            \
    }                                                                          \
    if (!why_.empty()) GTEST_FAIL() << "CUDA device unusable: " << why_;       \
  } while (0)

// Skips (honestly) unless the machine has `n` GPUs; after SKIP_WITHOUT_DEVICE.
#define SKIP_UNLESS_GPUS(n)                                                          \
  do {                                                                               \
    int found_ = 0;                                                                  \
    if (cudaGetDeviceCount(&found_) != cudaSuccess) found_ = 0;                      \
    cudaGetLastError();                                                              \
    if (found_ < (n)) GTEST_SKIP() << ::gradex::test_device::NeedsGpus((n), found_); \
  } while (0)

#endif  // GRADEX_TESTS_CUDA_DEVICE_H_
