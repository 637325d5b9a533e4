// The GPU tests' skip: where no CUDA device is visible (no GPU, no driver)
// a test ends as skipped, naming why. Include after <cuda_runtime_api.h>
// and <gtest/gtest.h>.
#ifndef GRADEX_TESTS_CUDA_DEVICE_H_
#define GRADEX_TESTS_CUDA_DEVICE_H_

#define SKIP_WITHOUT_DEVICE()                                                           \
  do {                                                                                  \
    int count = 0;                                                                      \
    const cudaError_t e = cudaGetDeviceCount(&count);                                   \
    if (e != cudaSuccess || count == 0) {                                               \
      GTEST_SKIP() << "no CUDA device: "                                                \
                   << (e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0"); \
    }                                                                                   \
  } while (0)

#endif  // GRADEX_TESTS_CUDA_DEVICE_H_
