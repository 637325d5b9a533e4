// A backend whose "device memory" is host memory and whose every operation is
// its host kernel: the CPU twins of the CUDA backend, bit for bit. CI runs the
// whole device path through it (a test hands it to the client or the
// pipeline; nothing in production code switches to it).
//
// Its queues run each operation at once, so its events are points in a log:
// every caller record, queue wait, queue record and caller wait is written
// there in order ("caller-record e1 stream 7", "queue q0 wait e1", ...), and a
// test reads the log to check that gradex orders its work after the trainer's
// and hands the result back before it completes the bucket.
#ifndef GRADEX_DEVICE_HOST_BACKEND_H_
#define GRADEX_DEVICE_HOST_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "device/device.h"

namespace gradex::device {

class HostBackend : public Backend {
 public:
  HostBackend() = default;

  const char* name() const override { return "host"; }
  absl::Status Available() const override { return absl::OkStatus(); }
  // Every pointer is "device" memory of device 0.
  absl::StatusOr<PointerInfo> Classify(const void* p) override;
  absl::StatusOr<std::unique_ptr<Queue>> NewQueue(const void* data) override;
  absl::StatusOr<std::shared_ptr<Event>> RecordCaller(uintptr_t stream, const void* data) override;
  absl::Status CallerWaits(uintptr_t stream, const Event& e) override;

  // The ordering log so far, and the buffers allocated so far (never
  // decreases: a test checks that a momentum-free bucket makes no velocity).
  std::vector<std::string> Log() const;
  uint64_t allocations() const;
  uint64_t allocated_floats() const;

  // For the queues.
  void Append(std::string line);
  uint64_t NextEvent();
  void CountAllocation(size_t n);

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> log_ ABSL_GUARDED_BY(mu_);
  uint64_t next_event_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_queue_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t allocations_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t allocated_floats_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gradex::device

#endif  // GRADEX_DEVICE_HOST_BACKEND_H_
