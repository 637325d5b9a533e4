// The device floor: one interface for a device backend, so that the bucket
// pipeline never names CUDA. A Backend classifies pointers, makes Queues on a
// pointer's device and orders them with the trainer's streams by events; a
// Queue is one ordered stream of work on one device: the residual operations
// of the call frame (ResidualMemory), the pipeline's own (allocation from a
// pool, uploads, the result's COO, factor masking), whole-bucket staging
// through pinned memory, and events.
//
// Backends: cuda_backend.h (CUDA), host_backend.h (host memory stands in for
// device memory: CI runs the whole device path through it, and it logs every
// event and wait so that tests can check the ordering), and the unavailable
// backend of a build without CUDA (every call names the fix). A second device
// (ROCm) is a new backend file and its kernels.
//
// Ordering is by events, never by blocking: a Queue's stream does not
// synchronise with the trainer's; Backend::RecordCaller marks the point a
// trainer's stream had reached when it handed a bucket over, Queue::Wait makes
// the queue's later work follow it, and Backend::CallerWaits hands a result
// back the same way. The host waits only where it needs a value (a count, the
// selected entries, a staged bucket); each Queue counts those waits.
//
// The checks (sizes, index bounds) and the byte counters live here, once: a
// backend implements the protected Do* operations on arguments already
// checked. Every operation gives the bits of its host kernel
// (collectives/residual_memory.h). One Queue is used by one thread at a time.
#ifndef GRADEX_DEVICE_DEVICE_H_
#define GRADEX_DEVICE_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/residual_memory.h"
#include "kernels/sparse.h"
#include "kernels/topk_step.h"

namespace gradex::device {

// Where a pointer's memory lives, as the backend's driver says.
struct PointerInfo {
  bool device = false;  // device (or managed) memory of this backend
  bool managed = false;
  int ordinal = -1;  // its device; -1 where the driver ties it to none
};

// A point in one stream's work (a cudaEvent_t in CUDA).
class Event {
 public:
  virtual ~Event() = default;
};

// Floats in one device's memory, zeroed when made, given back when destroyed
// (to the backend's pool: a steady step allocates nothing). Destroying one
// waits for the device's queued work first (it is rare: a slot dropped by a
// bucket rebuild, a restored checkpoint or the pipeline's end), since any
// queue of its device may still use it.
class Buffer {
 public:
  virtual ~Buffer() = default;
  std::span<float> span() const { return span_; }
  size_t size() const { return span_.size(); }

 protected:
  std::span<float> span_;
};

// What crossed between host and device through one Queue, and how often the
// host waited for it.
struct QueueCounters {
  uint64_t to_host_bytes = 0;    // payload, device to host (counts excluded)
  uint64_t to_device_bytes = 0;  // payload, host to device
  uint64_t host_waits = 0;       // stream or event synchronisations
};

class Queue : public ResidualMemory {
 public:
  ~Queue() override = default;

  // The device this queue works on.
  int device() const { return device_; }
  const QueueCounters& counters() const { return counters_; }

  // n zeros on the queue's device, in this queue's order: another queue
  // must Wait for a Record() of this one, taken after, before touching it.
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t n);
  // host -> x (as long as x).
  absl::Status Upload(std::span<const float> host, std::span<float> x);
  // x = 0, on the device.
  absl::Status Zero(std::span<float> x);
  // x = 0 but at the entries of (idx, val) (host memory, indices unique).
  absl::Status SparseToDense(std::span<const uint32_t> idx, std::span<const float> val,
                             std::span<float> x);
  // x[idx[i]] = 0 (host indices).
  absl::Status ZeroAt(std::span<const uint32_t> idx, std::span<float> x);
  // Whole-bucket staging: x into the queue's pinned buffer, returned once
  // there (the host waits); then the buffer's first x.size() values back into
  // x, ordered on the queue (no wait). A staged buffer is the queue's until
  // its next StageToHost; StageToDevice only queues the copy up, so the host
  // must not write the staged span after it.
  absl::StatusOr<std::span<float>> StageToHost(std::span<const float> x);
  absl::Status StageToDevice(std::span<float> x);

  // Later work on this queue follows `e` (no host wait). `e` may come from
  // another queue or from Backend::RecordCaller, of the same device.
  virtual absl::Status Wait(const Event& e) = 0;
  // The point this queue's work has reached (shared: a bucket slot keeps the
  // point of its last use, which the next queue to touch it waits for).
  virtual absl::StatusOr<std::shared_ptr<Event>> Record() = 0;
  // The host waits for every operation queued so far (and learns their
  // errors).
  absl::Status Synchronize();

  // ResidualMemory: the call frame's operations (checked, counted).
  absl::StatusOr<size_t> Accumulate(std::span<const float> grad, std::span<float> residual,
                                    std::span<float> velocity, float momentum) final;
  absl::Status SelectTopK(std::span<float> x, size_t k, uint32_t index_base,
                          const kernels::Accumulate* acc, kernels::ThresholdReuse* reuse,
                          kernels::SparseVec* out, size_t* nonfinite) final;
  absl::Status ScatterAdd(const kernels::SparseVec& v, uint32_t index_base, float scale,
                          std::span<float> x) final;
  absl::StatusOr<size_t> ZeroNonFinite(std::span<float> x, size_t* first) final;
  absl::StatusOr<double> SumOfSquares(std::span<const float> x) final;
  absl::Status CopyToHost(std::span<const float> x, std::span<float> host) final;

 protected:
  explicit Queue(int device) : device_(device) {}

  // The backend's operations, on checked arguments. The public wrappers
  // count one host wait for each operation that returns a value to the host
  // (two for a selection with threshold reuse); a backend counts any further
  // wait of its own with CountWait.
  virtual absl::StatusOr<std::unique_ptr<Buffer>> DoAllocate(size_t n) = 0;
  virtual absl::Status DoUpload(std::span<const float> host, std::span<float> x) = 0;
  virtual absl::Status DoZero(std::span<float> x) = 0;
  virtual absl::Status DoSparseToDense(std::span<const uint32_t> idx, std::span<const float> val,
                                       std::span<float> x) = 0;
  virtual absl::Status DoZeroAt(std::span<const uint32_t> idx, std::span<float> x) = 0;
  virtual absl::StatusOr<std::span<float>> DoStageToHost(std::span<const float> x) = 0;
  virtual absl::Status DoStageToDevice(std::span<float> x) = 0;
  virtual absl::Status DoSynchronize() = 0;
  virtual absl::StatusOr<size_t> DoAccumulate(std::span<const float> grad,
                                              std::span<float> residual, std::span<float> velocity,
                                              float momentum) = 0;
  // Appends to *out; *nonfinite gets the non-finite count after the
  // accumulation of `acc` (may be null: x as it is).
  virtual absl::Status DoSelectTopK(std::span<float> x, size_t k, uint32_t index_base,
                                    const kernels::Accumulate* acc, kernels::ThresholdReuse* reuse,
                                    kernels::SparseVec* out, size_t* nonfinite) = 0;
  virtual absl::Status DoScatterAdd(const kernels::SparseVec& v, uint32_t index_base, float scale,
                                    std::span<float> x) = 0;
  virtual absl::StatusOr<size_t> DoZeroNonFinite(std::span<float> x, size_t* first) = 0;
  virtual absl::StatusOr<double> DoSumOfSquares(std::span<const float> x) = 0;
  virtual absl::Status DoCopyToHost(std::span<const float> x, std::span<float> host) = 0;

  void CountWait() { ++counters_.host_waits; }

 private:
  const int device_;
  QueueCounters counters_;
  size_t staged_ = 0;  // floats of the last StageToHost
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "cuda", "host", "none".
  virtual const char* name() const = 0;
  // OK where this backend can work on device memory here; otherwise why,
  // naming the fix.
  virtual absl::Status Available() const = 0;
  // Where p's memory lives; INVALID_ARGUMENT when the driver cannot say.
  virtual absl::StatusOr<PointerInfo> Classify(const void* p) = 0;
  // A queue on the device of `data`, which must be this backend's device
  // memory (INVALID_ARGUMENT otherwise).
  virtual absl::StatusOr<std::unique_ptr<Queue>> NewQueue(const void* data) = 0;
  // The point the caller's stream (0: the legacy default stream, torch's,
  // also for a caller built with per-thread default streams) has reached,
  // recorded on the caller's thread; `data` names the device.
  virtual absl::StatusOr<std::shared_ptr<Event>> RecordCaller(uintptr_t stream,
                                                              const void* data) = 0;
  // The caller's stream (0: the default stream) runs its later work after
  // `e` (no host wait).
  virtual absl::Status CallerWaits(uintptr_t stream, const Event& e) = 0;
};

// The backend this build uses by default: CUDA where gradex was built with
// it, else the unavailable one. Lives as long as the process.
Backend* DefaultBackend();

}  // namespace gradex::device

#endif  // GRADEX_DEVICE_DEVICE_H_
