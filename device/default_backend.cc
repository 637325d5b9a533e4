// The build's default backend, and the one a build without CUDA gets: every
// call names the fix.
#include "absl/strings/str_cat.h"
#include "device/device.h"

#if GRADEX_DEVICE_CUDA
#include "device/cuda_backend.h"
#endif

namespace gradex::device {
namespace {

absl::Status NoDevice() {
  return absl::UnimplementedError(
      "Memory::kDevice: this gradex was built without CUDA (GRADEX_CUDA=OFF or no nvcc); pass "
      "host memory, or install a CUDA build (the cu13 wheel)");
}

class UnavailableBackend : public Backend {
 public:
  const char* name() const override { return "none"; }
  absl::Status Available() const override { return NoDevice(); }
  absl::StatusOr<PointerInfo> Classify(const void*) override { return NoDevice(); }
  absl::StatusOr<std::unique_ptr<Queue>> NewQueue(const void*) override { return NoDevice(); }
  absl::StatusOr<std::shared_ptr<Event>> RecordCaller(uintptr_t, const void*) override {
    return NoDevice();
  }
  absl::Status CallerWaits(uintptr_t, const Event&) override { return NoDevice(); }
  PoolUse Pools() override { return {}; }
  void Trim() override {}
};

}  // namespace

Backend* DefaultBackend() {
#if GRADEX_DEVICE_CUDA
  static Backend* const backend = MakeCudaBackend().release();
#else
  static Backend* const backend = new UnavailableBackend;
#endif
  return backend;
}

}  // namespace gradex::device
