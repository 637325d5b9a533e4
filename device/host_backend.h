// A backend whose "device memory" is host memory and whose every operation is
// its host kernel: the CPU twins of the CUDA backend, bit for bit. CI runs the
// whole device path through it (a test hands it to the client or the
// pipeline; nothing in production code switches to it).
//
// Its queues run each operation at once, so its events are points in a log:
// every caller record, queue wait, queue record and caller wait is written
// there in order ("caller-record e1 stream 7", "queue q0 wait e1", ...), and a
// test reads the log to check that gradex orders its work after the trainer's
// and hands the result back before it completes the bucket. Its queues share
// the floor's policy (queue.cc), so a test counts here the waits, pinned
// allocations and pool bytes the CUDA backend makes, and injects the faults
// a GPU would report.
#ifndef GRADEX_DEVICE_HOST_BACKEND_H_
#define GRADEX_DEVICE_HOST_BACKEND_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "device/device.h"

namespace gradex::device {

class HostBackend : public Backend {
 public:
  // `pool_limit_bytes` (0: none) bounds the bytes of live buffers, as the
  // CUDA backend's pool is bounded.
  explicit HostBackend(uint64_t pool_limit_bytes = 0);

  const char* name() const override { return "host"; }
  absl::Status Available() const override { return absl::OkStatus(); }
  // Every pointer is "device" memory of device 0.
  absl::StatusOr<PointerInfo> Classify(const void* p) override;
  absl::StatusOr<std::unique_ptr<Queue>> NewQueue(const void* data) override;
  absl::StatusOr<std::shared_ptr<Event>> RecordCaller(uintptr_t stream, const void* data) override;
  absl::Status CallerWaits(uintptr_t stream, const Event& e) override;
  // held = used = the bytes of live buffers (nothing is kept for reuse).
  PoolUse Pools() override;
  void Trim() override;

  // The ordering log so far, and the buffers allocated so far (never
  // decreases: a test checks that a momentum-free bucket makes no velocity).
  std::vector<std::string> Log() const;
  uint64_t allocations() const;
  uint64_t allocated_floats() const;
  uint64_t trims() const;

  // Fault injection. The next operation named `op` of any queue fails with
  // `fault` as the CUDA backend's would: a queued one ("SparseToDense",
  // "ZeroAt", "ScatterAdd", "UploadStaged", "StageToDevice", "Zero") returns
  // OK and its queue's next wait reports the fault, as a kernel's fault
  // surfaces at the next synchronisation; "CallerWaits" fails at once.
  void FailNext(std::string op, absl::Status fault);

  // For the queues.
  void Append(std::string line);
  uint64_t NextEvent();
  void CountAllocation(size_t n);
  // The injected fault of `op`, once (OK when none).
  absl::Status Injected(const char* op);

  // The live buffers' bytes, shared with the buffers (they may outlive it).
  struct Live {
    std::atomic<uint64_t> bytes{0};
  };

 private:
  const uint64_t pool_limit_;
  const std::shared_ptr<Live> live_ = std::make_shared<Live>();
  mutable absl::Mutex mu_;
  std::vector<std::string> log_ ABSL_GUARDED_BY(mu_);
  uint64_t next_event_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_queue_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t allocations_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t allocated_floats_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t trims_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, absl::Status> faults_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gradex::device

#endif  // GRADEX_DEVICE_HOST_BACKEND_H_
