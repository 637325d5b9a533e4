// Memory::kDevice: with CUDA and a GPU, a bucket in device memory is staged
// through pinned host memory and its result copied back (one rank,
// dense-ring: the result is the gradient). Without a GPU the test skips;
// without CUDA in the build, device buckets are UNIMPLEMENTED.
#include <gtest/gtest.h>

#include <future>
#include <vector>

#include "services/client/client.h"
#include "services/client/device_staging.h"

#if GRADEX_CLIENT_CUDA
#include <cuda_runtime_api.h>
#endif

namespace gradex::client {
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
#if GRADEX_CLIENT_CUDA
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

}  // namespace
}  // namespace gradex::client
