// gradex does not serialise with the trainer: while the legacy default stream
// (torch's) is held by a 300 ms host function, a fresh queue's first
// allocation, a 25M-entry top-k selection and a whole-bucket staging all
// finish. Any implicit synchronisation with the legacy stream (a blocking
// stream, cudaFree, a synchronous copy, cudaDeviceSynchronize) would make
// them wait for the hold. The check is exact: the legacy stream is still busy
// (cudaStreamQuery: not ready) when the last of them has returned. Skips for
// "no device" where there is no GPU; prints the times.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "device/cuda_backend.h"
#include "device/device.h"
#include "kernels/sparse.h"
#include "tests/cuda_device.h"

namespace gradex::device {
namespace {

constexpr int kHoldMs = 300;

void CUDART_CB Hold(void* ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<int*>(ms)));
}

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

TEST(CudaConcurrency, GradexFinishesWhileTheLegacyStreamIsHeld) {
  SKIP_WITHOUT_DEVICE();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const size_t n = 25'000'000, k = n / 100;
  // The trainer's bucket, written before the hold: small integers in a
  // pattern (distinct magnitudes enough for the selection to be real work).
  std::vector<float> host(n);
  uint32_t s = 12345;
  for (float& v : host) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<float>(static_cast<int32_t>(s >> 8) % 100000) / 1024.0f;
  }
  float* bucket = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&bucket), n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(bucket, host.data(), n * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
  std::unique_ptr<Backend> backend = MakeCudaBackend();
  ASSERT_TRUE(backend->Available().ok()) << backend->Available();

  int hold_ms = kHoldMs;
  ASSERT_EQ(cudaLaunchHostFunc(cudaStreamLegacy, Hold, &hold_ms), cudaSuccess);
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<Queue>> q = backend->NewQueue(bucket);
  ASSERT_TRUE(q.ok()) << q.status();
  const double made_ms = MsSince(t0);
  absl::StatusOr<std::unique_ptr<Buffer>> buf = (*q)->Allocate(n);
  ASSERT_TRUE(buf.ok()) << buf.status();
  const double allocated_ms = MsSince(t0);
  kernels::SparseVec out;
  size_t nonfinite = 0;
  absl::Status selected = (*q)->SelectTopK({bucket, n}, k, 0, nullptr, nullptr, &out, &nonfinite);
  ASSERT_TRUE(selected.ok()) << selected;
  const double selected_ms = MsSince(t0);
  absl::StatusOr<std::span<float>> staged = (*q)->StageToHost((*buf)->span());
  ASSERT_TRUE(staged.ok()) << staged.status();
  const double staged_ms = MsSince(t0);
  // The hold is still on: nothing above waited for the legacy stream.
  const cudaError_t legacy = cudaStreamQuery(cudaStreamLegacy);
  std::printf(
      "legacy stream held %d ms: queue made %.1f ms, first allocation %.1f ms, 25M selection "
      "%.1f ms, staging %.1f ms after the hold began; legacy stream then: %s\n",
      kHoldMs, made_ms, allocated_ms, selected_ms, staged_ms, cudaGetErrorName(legacy));
  EXPECT_EQ(legacy, cudaErrorNotReady)
      << "gradex's queue waited for the trainer's legacy stream (finished at " << staged_ms
      << " ms of a " << kHoldMs << " ms hold)";
  cudaGetLastError();  // cudaErrorNotReady is not an error of the next call
  EXPECT_EQ(out.nnz(), k);
  EXPECT_EQ(nonfinite, 0u);
  EXPECT_EQ(staged->size(), n);
  ASSERT_EQ(cudaStreamSynchronize(cudaStreamLegacy), cudaSuccess);  // the hold's end
  q->reset();
  cudaFree(bucket);
}

}  // namespace
}  // namespace gradex::device
