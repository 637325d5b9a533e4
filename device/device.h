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
// back the same way. The host waits only where it needs a value (the selected
// entries, a norm, a staged bucket), at most twice per device bucket and
// step whatever the block count; each Queue counts those waits, and what a
// steady step never does (synchronise the whole device, allocate outside
// the pool: queue.cc grows pinned staging geometrically and keeps it).
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
#include <utility>
#include <vector>

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
// to the backend's pool in the device's order: after the work every queue of
// its device had queued by then, without a host wait (a steady step
// allocates and frees nothing).
class Buffer {
 public:
  virtual ~Buffer() = default;
  std::span<float> span() const { return span_; }
  size_t size() const { return span_.size(); }

 protected:
  std::span<float> span_;
};

// What crossed between host and device through one Queue, how often the host
// waited for it, and what a steady step must not do: synchronise the whole
// device, or allocate outside the backend's pool (pinned staging growing).
struct QueueCounters {
  uint64_t to_host_bytes = 0;    // payload, device to host (counts excluded)
  uint64_t to_device_bytes = 0;  // payload, host to device
  uint64_t host_waits = 0;       // the host waiting for the queue's work
  uint64_t device_syncs = 0;     // whole-device synchronisations
  uint64_t allocations = 0;      // allocations outside the pool
};

// What a backend's private device pools hold (device memory outside the
// trainer's allocator: residuals, velocities, step scratch) and their bound.
struct PoolUse {
  uint64_t held = 0;   // taken from the driver: in use or kept for reuse
  uint64_t used = 0;   // in live buffers and scratch
  uint64_t limit = 0;  // `used` may not pass it (0: no bound)
};

// The error of an allocation past the pool's bound, naming the fixes.
absl::Status PoolExhausted(size_t bytes, const PoolUse& use, int device);

class Queue : public collectives::ResidualMemory {
 public:
  ~Queue() override = default;

  // The device this queue works on.
  int device() const { return device_; }
  const QueueCounters& counters() const { return counters_; }
  // Work queued since the host last waited for this queue: its faults are
  // not known yet (a Synchronize learns them).
  bool pending() const { return pending_; }
  // The first error a wait of this queue met since the last call (a fault of
  // work queued earlier surfaces at the next wait, whoever waits), cleared.
  absl::Status TakeFault();

  // n zeros on the queue's device from the backend's pool, in this queue's
  // order: another queue must Wait for a Record() of this one, taken after,
  // before touching it. RESOURCE_EXHAUSTED past the pool's bound.
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t n);
  // host -> x (as long as x); the host waits (a slot's first device step).
  absl::Status Upload(std::span<const float> host, std::span<float> x);
  // x = 0, on the device.
  absl::Status Zero(std::span<float> x);
  // x = 0 but at the entries of (idx, val) (host memory, indices unique),
  // staged through the queue's pinned memory: no wait.
  absl::Status SparseToDense(std::span<const uint32_t> idx, std::span<const float> val,
                             std::span<float> x);
  // x[idx[i]] = 0 (host indices), staged as SparseToDense.
  absl::Status ZeroAt(std::span<const uint32_t> idx, std::span<float> x);
  // n floats of the queue's pinned memory for the caller to fill, then
  // UploadStaged queues their copy into x (as long as `staged`): a dense
  // result or a kept residual goes up without a pageable copy or a wait.
  // The span is the caller's until the next call on this queue.
  absl::StatusOr<std::span<float>> UpStaging(size_t n);
  absl::Status UploadStaged(std::span<const float> staged, std::span<float> x);
  // ZeroNonFinite without a wait: TakeNonFinite gives its count (and the
  // first's index in *first) after the next wait of the queue, or waits.
  absl::Status ZeroNonFiniteLater(std::span<float> x);
  absl::StatusOr<size_t> TakeNonFinite(size_t* first);
  // Accumulate without reading its non-finite count: no wait.
  absl::Status AccumulateLater(std::span<const float> grad, std::span<float> residual,
                               std::span<float> velocity, float momentum);
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

  // ResidualMemory: the call frame's operations (checked, counted). A
  // selection makes no threshold-reuse try (its candidate count would cost a
  // host round trip of its own); the reuse state follows its threshold.
  absl::StatusOr<size_t> Accumulate(std::span<const float> grad, std::span<float> residual,
                                    std::span<float> velocity, float momentum) final;
  absl::Status SelectTopK(std::span<float> x, size_t k, uint32_t index_base,
                          const kernels::Accumulate* acc, kernels::ThresholdReuse* reuse,
                          kernels::SparseVec* out, size_t* nonfinite) final;
  absl::Status SelectTopKBlocks(std::span<float> x, const std::vector<size_t>& bounds,
                                const std::vector<size_t>& keeps, const kernels::Accumulate* acc,
                                std::vector<kernels::ThresholdReuse>* reuse,
                                std::vector<kernels::SparseVec>* out, size_t* nonfinite) final;
  absl::Status ScatterAdd(const kernels::SparseVec& v, uint32_t index_base, float scale,
                          std::span<float> x) final;
  absl::StatusOr<size_t> ZeroNonFinite(std::span<float> x, size_t* first) final;
  absl::StatusOr<double> SumOfSquares(std::span<const float> x) final;
  absl::Status CopyToHost(std::span<const float> x, std::span<float> host) final;

 protected:
  explicit Queue(int device) : device_(device) {}

  // The queue's pinned host memory, grown here (geometrically, kept): the
  // selected entries coming down (kDown: indices, then values), what goes up
  // (kUp: COO entries and staged floats, a ring the host refills after each
  // wait) and whole buckets (kBucket). A region grown out of stays valid
  // until the queue ends (copies queued from it may still run), so growing
  // never waits; geometric growth bounds what is kept to twice the last.
  enum class Pinned { kDown = 0, kUp = 1, kBucket = 2 };
  std::span<std::byte> pinned(Pinned which) const { return pinned_[static_cast<int>(which)]; }
  // pinned(kDown) holds `room` indices, then their values from this offset.
  static size_t DownValues(size_t room) { return (room * sizeof(uint32_t) + 63) / 64 * 64; }

  // The backend's operations, on checked arguments. Every wait of the host
  // for the queue is one the wrappers count, and it drains the queue's
  // stream (what the ring and the deferred counts rely on).
  virtual absl::StatusOr<std::unique_ptr<Buffer>> DoAllocate(size_t n) = 0;
  // The pool the queue allocates from, as it is now.
  virtual absl::StatusOr<PoolUse> DoPoolUse() = 0;
  // A new pinned region of `bytes` for `which`; the old one stays valid until
  // the queue ends (copies queued from it may still run). An allocation
  // outside the pool: counted by the caller.
  virtual absl::StatusOr<std::span<std::byte>> DoGrowPinned(Pinned which, size_t bytes) = 0;
  virtual absl::Status DoUpload(std::span<const float> host, std::span<float> x) = 0;
  virtual absl::Status DoZero(std::span<float> x) = 0;
  // idx and val are in pinned(kUp), filled already.
  virtual absl::Status DoSparseToDense(std::span<const uint32_t> idx, std::span<const float> val,
                                       std::span<float> x) = 0;
  virtual absl::Status DoZeroAt(std::span<const uint32_t> idx, std::span<float> x) = 0;
  virtual absl::Status DoScatterAdd(std::span<const uint32_t> idx, std::span<const float> val,
                                    uint32_t index_base, float scale, std::span<float> x) = 0;
  // `staged` is in pinned(kUp).
  virtual absl::Status DoUploadStaged(std::span<const float> staged, std::span<float> x) = 0;
  // Into pinned(kBucket), which holds x.size() floats.
  virtual absl::Status DoStageToHost(std::span<const float> x) = 0;
  virtual absl::Status DoStageToDevice(std::span<float> x) = 0;
  virtual absl::Status DoSynchronize() = 0;
  virtual absl::StatusOr<size_t> DoAccumulate(std::span<const float> grad,
                                              std::span<float> residual, std::span<float> velocity,
                                              float momentum) = 0;
  virtual absl::Status DoAccumulateLater(std::span<const float> grad, std::span<float> residual,
                                         std::span<float> velocity, float momentum) = 0;
  // Appends to *out through pinned(kDown) (room for min(k, n) entries);
  // *nonfinite gets the non-finite count after the accumulation of `acc`
  // (may be null: x as it is).
  virtual absl::Status DoSelectTopK(std::span<float> x, size_t k, uint32_t index_base,
                                    const kernels::Accumulate* acc, kernels::SparseVec* out,
                                    size_t* nonfinite) = 0;
  // Every block's selection with one wait (pinned(kDown) holds every
  // block's room); blocks as kernels::BlockTopKStep's, out resized already.
  virtual absl::Status DoSelectTopKBlocks(std::span<float> x, const std::vector<size_t>& bounds,
                                          const std::vector<size_t>& keeps,
                                          const kernels::Accumulate* acc,
                                          std::vector<kernels::SparseVec>* out,
                                          size_t* nonfinite) = 0;
  virtual absl::StatusOr<size_t> DoZeroNonFinite(std::span<float> x, size_t* first) = 0;
  virtual absl::Status DoZeroNonFiniteLater(std::span<float> x) = 0;
  // The deferred count; called only after a wait that followed it.
  virtual size_t DoTakeNonFinite(size_t* first) = 0;
  virtual absl::StatusOr<double> DoSumOfSquares(std::span<const float> x) = 0;
  virtual absl::Status DoCopyToHost(std::span<const float> x, std::span<float> host) = 0;

  // A whole-device synchronisation the backend could not avoid, and an
  // allocation outside the pool of its own (a queue's first).
  void CountDeviceSync() { ++counters_.device_syncs; }
  void CountAllocation() { ++counters_.allocations; }

 private:
  // `which` holds at least `bytes` (grown by half again, or doubled).
  absl::Status ReservePinned(Pinned which, size_t bytes);
  // `bytes` of the up ring, which the host writes from its start again
  // after each wait; when it is full, a region for all that was asked since
  // the last wait replaces it (never a wait).
  absl::StatusOr<std::span<std::byte>> TakeUp(size_t bytes);
  // idx and val into the up ring.
  absl::StatusOr<std::pair<std::span<const uint32_t>, std::span<const float>>> StageUp(
      std::span<const uint32_t> idx, std::span<const float> val);
  // A wait for the queue (counted) ended with `s`: on success nothing is
  // pending and the ring is free; an error is kept for TakeFault.
  absl::Status Waited(absl::Status s);
  void Queued() { pending_ = true; }

  const int device_;
  QueueCounters counters_;
  size_t staged_ = 0;  // floats of the last StageToHost
  std::span<std::byte> pinned_[3];
  size_t up_used_ = 0;           // ring bytes written since the last wait
  size_t up_demand_ = 0;         // ring bytes asked for since the last wait
  bool pending_ = false;         // work queued since the last wait
  bool deferred_ = false;        // a ZeroNonFiniteLater not yet taken
  uint64_t drains_ = 0;          // successful waits so far
  uint64_t deferred_drain_ = 0;  // drains_ when it was queued
  absl::Status fault_;
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
  // What this backend's private pools hold now, over every device, and the
  // smallest device bound.
  virtual PoolUse Pools() = 0;
  // Gives the memory the pools keep for reuse back to the driver (after the
  // last buffer and queue of a client went: its close()).
  virtual void Trim() = 0;
};

// The backend this build uses by default: CUDA where gradex was built with
// it, else the unavailable one. Lives as long as the process.
Backend* DefaultBackend();

}  // namespace gradex::device

#endif  // GRADEX_DEVICE_DEVICE_H_
