// Memory::kDevice: with CUDA and a GPU, a bucket in device memory is staged
// through pinned host memory and its result copied back (one rank,
// dense-ring: the result is the gradient). Without a GPU the test skips;
// without CUDA in the build, device buckets are UNIMPLEMENTED.
#include <gtest/gtest.h>

#include <future>
#include <thread>
#include <vector>

#include "services/agent/device_staging.h"
#include "services/client/client.h"

#if GRADEX_AGENT_CUDA
#include <cuda_runtime_api.h>
#endif

namespace gradex::client {
using agent::DeviceStaging;

namespace {

ClientOptions OneRank() {
  ClientOptions o;
  o.job = "device-test";
  o.algorithm = "dense-ring";
  o.mean = true;
  o.timeout = std::chrono::milliseconds(20000);
  return o;
}

absl::Status Exchange(Client& c, std::span<float> data, Memory m) {
  auto p = std::make_shared<std::promise<absl::Status>>();
  c.AllreduceAsync({{0, data.size()}}, data, m, true, [p](absl::Status s) { p->set_value(s); });
  return p->get_future().get();
}

TEST(ClientDeviceTest, DeviceBucketRoundTrip) {
  absl::StatusOr<std::unique_ptr<Client>> c = Client::Create(OneRank());
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<float> host(1000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 13) - 6.0f;
  if (!DeviceStaging::Available()) {
    absl::Status s = Exchange(**c, host, Memory::kDevice);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
    EXPECT_NE(s.message().find("CUDA"), std::string::npos) << s;
    return;
  }
#if GRADEX_AGENT_CUDA
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    GTEST_SKIP() << "no GPU";
  }
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), host.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
  absl::Status s = Exchange(**c, std::span<float>(d, host.size()), Memory::kDevice);
  ASSERT_TRUE(s.ok()) << s;
  std::vector<float> back(host.size());
  ASSERT_EQ(cudaMemcpy(back.data(), d, back.size() * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(back, host) << "one rank, dense: the mean is the gradient";
  // Host memory declared as device memory is refused, not read as such.
  EXPECT_EQ(Exchange(**c, host, Memory::kDevice).code(), absl::StatusCode::kInvalidArgument);
  cudaFree(d);
#endif
}

// A rank's buffer on device 1, staged by a thread whose current device is
// 0: the staging works on device 1 (the memory's; its pinned buffer belongs
// to device 1) and leaves the thread on device 0 (the caller's device is
// the caller's). Needs 2 GPUs; skips otherwise.
TEST(ClientDeviceTest, StagingFollowsThePointersDevice) {
  if (!DeviceStaging::Available()) GTEST_SKIP() << "built without CUDA";
#if GRADEX_AGENT_CUDA
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 2) {
    cudaGetLastError();
    GTEST_SKIP() << "fewer than 2 GPUs (" << devices << ")";
  }
  std::vector<float> host(4096);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 7);
  float* d = nullptr;
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), host.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
  int current = -1;
  cudaPointerAttributes pinned_attr{};
  std::vector<float> staged;
  absl::Status to_device;
  std::thread([&] {
    if (cudaSetDevice(0) != cudaSuccess) return;
    DeviceStaging staging;
    absl::StatusOr<std::span<float>> h = staging.ToHost(std::span<const float>(d, host.size()));
    if (!h.ok()) {
      to_device = h.status();
      return;
    }
    cudaGetDevice(&current);
    cudaPointerGetAttributes(&pinned_attr, h->data());
    staged.assign(h->begin(), h->end());
    for (float& x : *h) x *= 2;
    to_device = staging.ToDevice(std::span<float>(d, host.size()));
  }).join();
  ASSERT_TRUE(to_device.ok()) << to_device;
  EXPECT_EQ(current, 0) << "the staging left the calling thread on another device";
  EXPECT_EQ(pinned_attr.type, cudaMemoryTypeHost);
  EXPECT_EQ(pinned_attr.device, 1) << "the pinned buffer belongs to another device";
  EXPECT_EQ(staged, host);
  std::vector<float> back(host.size());
  ASSERT_EQ(cudaMemcpy(back.data(), d, back.size() * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (size_t i = 0; i < host.size(); ++i) ASSERT_EQ(back[i], 2 * host[i]) << i;
  cudaFree(d);
  cudaSetDevice(0);
#endif
}

}  // namespace
}  // namespace gradex::client
