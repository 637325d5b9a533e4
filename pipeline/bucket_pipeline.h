// A bucket is one object with one owner: the BucketPipeline. Everything a
// bucket keeps across steps lives here, keyed per parameter span (so it
// survives DDP's bucket rebuild): its residual, its momentum velocity, its
// algorithm objects (SpanStore's BucketSlot), and the staging of device
// memory. Submit queues a bucket; two threads take the queue in the order
// issued:
//   - the selection thread gathers the bucket's slot, applies the momentum
//     correction and (when the epoch's agreed rules refuse them: NaN and
//     infinite values a peer sends are then bad frames) exchanges this
//     rank's own non-finite values as 0, failing the bucket after its
//     exchange with INVALID_ARGUMENT naming them; opens the step when none is
//     open, and runs the call's local part (the agent's PlanBucket /
//     PrepareBucket, which accumulate into the residual through the call
//     frame and select);
//   - the progress thread exchanges the buckets in order (ExchangeBucket),
//     writes each result into its data (mean or sum), masks the velocity,
//     ends steps and runs the callbacks.
// The selection thread prepares bucket b+1 while bucket b exchanges, never
// further ahead, and opens a step only when the progress thread is idle, so
// the agent is never entered by both threads but through the per-bucket
// calls agent.h allows. A bucket that is not exchanged (a failed step, a
// closing pipeline) keeps this rank's whole contribution in its residual.
#ifndef GRADEX_PIPELINE_BUCKET_PIPELINE_H_
#define GRADEX_PIPELINE_BUCKET_PIPELINE_H_

#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "device/device.h"
#include "pipeline/agent.h"
#include "pipeline/device_path.h"
#include "pipeline/span_store.h"

namespace gradex::pipeline {

enum class Memory { kHost, kDevice };

struct PipelineOptions {
  // Flush's and Close's wait, and Export/Import's wait for the buckets in
  // flight.
  std::chrono::milliseconds timeout{60000};
  // The largest bucket (elements); larger ones are refused.
  size_t max_bucket_elements = size_t{1} << 28;
  bool mean = true;  // results are the mean over ranks (DDP); false: the sum
  // Selection of bucket b+1 overlaps the exchange of bucket b; false: each
  // bucket is selected after the previous one's exchange (the same bits).
  bool pipeline = true;
  // DGC's momentum correction m in [0, 1) (0: off) and factor masking
  // (ClientOptions::momentum_correction, factor_masking).
  double momentum = 0;
  bool factor_masking = true;
  // Where Memory::kDevice buckets are worked on (outlives the pipeline);
  // null: device::DefaultBackend(). Tests pass a device::HostBackend.
  device::Backend* device = nullptr;
};

// How one bucket ended: its callback's argument and its future's value.
struct BucketEnd {
  using TimePoint = std::chrono::system_clock::time_point;
  absl::Status status;
  std::vector<ParamSpan> spans;
  size_t elements = 0;
  uint64_t step = 0;       // the training step it belonged to
  uint32_t index = 0;      // its issue order in the step
  BucketOutcome outcome;   // outcome.algorithm empty: it never reached the agent
  size_t nonfinite = 0;    // gradient values refused (exchanged as 0)
  double residual_l2 = 0;  // of its residual afterwards
  // Its data's way to the exchange, and the bytes its staging copied device
  // to host and back (0 for host buckets).
  DevicePath device_path = DevicePath::kHost;
  uint64_t device_to_host_bytes = 0, host_to_device_bytes = 0;
  // Times the host waited for the device for this bucket (counts, the
  // selected entries, staging; device::QueueCounters), and what a steady
  // step never does: whole-device synchronisations and allocations outside
  // the device pool (pinned staging growing).
  uint64_t device_waits = 0;
  uint64_t device_syncs = 0, device_allocations = 0;
  // Bytes gradex's private device pools held at the bucket's end (device
  // buckets; 0 for host ones).
  uint64_t device_pool_bytes = 0;
  // Set for a step's last bucket: the step's end (EndStep's status and
  // outcome; its results and stats are in the buckets' ends).
  std::optional<absl::Status> step_status;
  StepOutcome step_outcome;
  TimePoint queued, select_start, select_end, exchange_start, end;
};

class BucketPipeline {
 public:
  using Done = std::function<void(const BucketEnd&)>;
  // `agent` is started and outlives the pipeline. `observer` (may be empty)
  // sees every bucket's end first, on the progress thread, before its own
  // callback.
  BucketPipeline(Agent* agent, PipelineOptions options, Done observer = {});
  ~BucketPipeline();
  BucketPipeline(const BucketPipeline&) = delete;
  BucketPipeline& operator=(const BucketPipeline&) = delete;

  // Queues one bucket. On success `data` (the bucket's gradient, laid out as
  // `spans`) receives the mean (or sum) over ranks; on failure the bucket's
  // gradient is kept in its residual and `data` is unchanged, but for the
  // momentum correction, which writes the velocity over a host bucket's
  // gradient before the exchange at a span's first step (u = g) or when the
  // call cannot run (elsewhere the call fuses it into its own pass). `data` stays valid until
  // `done`, which runs on the progress thread. `last_in_step` ends the training step.
  // `stream` (a cudaStream_t; 0: the default stream) is the stream a device
  // bucket was written on: gradex's work on the bucket follows the point that
  // stream had reached at this call, and the stream's later work follows the
  // result (events both ways; the trainer's thread never waits).
  std::future<BucketEnd> Submit(std::vector<ParamSpan> spans, std::span<float> data, Memory memory,
                                bool last_in_step, Done done = {}, uintptr_t stream = 0);
  // A host bucket whose result is not written back (read only: its end's
  // outcome holds the result; gradex-agent's synthetic steps).
  std::future<BucketEnd> Submit(std::vector<ParamSpan> spans, std::span<const float> grad,
                                bool last_in_step, Done done = {});
  // Waits (up to the timeout) until every queued bucket has ended.
  // FAILED_PRECONDITION from a callback (the thread it would wait for).
  absl::Status Flush();
  // Queued buckets end CANCELLED with their gradients kept in their
  // residuals; the bucket exchanging ends first. Idempotent.
  absl::Status Close();

  // Every span's residual and velocity, between steps (FAILED_PRECONDITION
  // inside a step, or from a callback).
  absl::StatusOr<SpanState> Export();
  // Replaces every span's state, between steps (nothing queued); before the
  // first epoch `step` also sets the agent's step counter.
  absl::Status Import(SpanState state, std::optional<uint64_t> step);

 private:
  // A queued bucket: what it was given, what the selection thread made of
  // it, and its end as it fills in (spans, step, index, timings, outcome).
  struct Item {
    BucketEnd end;
    std::span<float> data;
    bool writable = true;  // the result is written into data
    Memory memory = Memory::kHost;
    bool last_in_step = false;
    Done done;
    // The trainer's stream and the point it had reached at Submit (device
    // buckets), or why that could not be recorded.
    uintptr_t stream = 0;
    std::shared_ptr<device::Event> handover;
    absl::Status handover_status;
    std::shared_ptr<std::promise<BucketEnd>> promise;
    // Filled by the selection thread.
    std::unique_ptr<BucketCall> call;  // null: it never reached the agent (see status)
    absl::Status status;               // why not (call null), or the non-finite refusal
    std::span<float> host;             // what is exchanged: data, or a staging buffer
    int staging = -1;                  // which queue (device buckets)
    device::Queue* queue = nullptr;    // its queue (device buckets that reached one)
    // The residual lives on the device: the whole call runs there (the device
    // path), or `staged`: the slot's accumulated residual was staged down for
    // a host call (a probe, a fallback) and what the call keeps goes back up.
    bool device_residual = false;
    bool staged = false;
    // The device path's non-finite refusal, counted on the device and read
    // with a later wait (TakeRefusal).
    bool refusal_pending = false;
    // The device work of the bucket faulted: its result is not handed back.
    bool device_fault = false;
  };

  std::future<BucketEnd> Queue(Item item);
  void SelectLoop();
  void ExchangeLoop();
  // One bucket's first half (selection thread, state_mu_ held): checks,
  // staging, slot, momentum, step opening, PlanBucket and PrepareBucket.
  void Select(Item& item) ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_mu_);
  // Select's parts (bucket_pipeline_select.cc): the bucket's slot, gathered (slots
  // it moves come off the device first); the step opened when none is; a
  // bucket over kMaxStepBuckets kept in its residual; the plan, the path to
  // the exchange, the non-finite refusal, the momentum and the local part.
  absl::StatusOr<BucketSlot*> GatherSlot(Item& item) ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_mu_);
  void OpenStep() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_mu_);
  void KeepOverflow(Item& item, BucketSlot* slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_mu_);
  void PlanAndPrepare(Item& item, BucketSlot* slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_mu_);
  static size_t Elements(const std::vector<ParamSpan>& spans);
  // Waits until the progress thread has taken the previous bucket and, when
  // `idle`, finished it too; the bucket it is exchanging must not use any
  // of `touched` (the slots the next bucket's gathering would touch).
  void WaitTurn(bool idle, const std::vector<const BucketSlot*>& touched);
  // One bucket's second half (progress thread): the exchange and its result.
  absl::Status Finish(Item& item, BucketOutcome* out);
  // Adds what `queue` copied each way and waited since `before` to `end`.
  static void AddDeviceWork(const device::QueueCounters& before, const device::Queue& queue,
                            BucketEnd* end);
  // Finish less the device hand-back and counting.
  absl::Status FinishCall(Item& item, BucketOutcome* out);
  // Whether factor masking applies to the bucket's result (both paths):
  // momentum correction and factor masking on, the call (its non-finite
  // refusal) and its residual fine.
  bool FactorMaskingOn(const Item& item, bool residual_ok) const {
    return item.status.ok() && residual_ok && options_.momentum > 0 && options_.factor_masking;
  }
  // u <- m*u + g per span of the slot, written over the gradient.
  void AddMomentum(const Item& item, BucketSlot* slot) const;
  // The queue `i` on the bucket's device (made, or remade for another
  // device), ordered after the trainer's stream at Submit.
  absl::StatusOr<device::Queue*> QueueFor(int i, const Item& item);
  // Keeps a bucket that never ran in its residual (Close's queue).
  void KeepUnrun(Item& item) ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_mu_);
  // The bucket's data on the host (itself, or staged whole) with its slot's
  // state there too (copied back from the device when it was held there).
  absl::Status ToHostPath(Item& item, BucketSlot* slot, device::Queue* queue);
  // The device path: the slot's state on the data's GPU (uploaded once when
  // it was on the host), the call working there through `queue`.
  absl::Status ToDevicePath(Item& item, BucketSlot* slot, device::Queue* queue);
  // A host call for a slot resident on the device, which stays there: the
  // gradient's non-finite values zeroed and the momentum and gradient
  // accumulated on the device, the residual staged down once and zeroed
  // there; the call starts from a zero host residual.
  // `refuse`: the non-finite gradient values are zeroed first (their count
  // in item.end.nonfinite, the first's index in *first).
  absl::Status ToStagedPath(Item& item, BucketSlot* slot, device::Queue* queue, bool momentum,
                            bool refuse, size_t* first);
  // The result into a device path bucket's data, with factor masking.
  absl::Status FinishOnDevice(Item& item, const BucketOutcome& out, bool residual_ok);
  // A staged call's end: what it kept goes back up (only when nonzero), the
  // factor mask onto the device velocity.
  absl::Status FinishStaged(Item& item, bool mask);
  // A device bucket's end: the slot's last use and the result handed to the
  // trainer's stream by events.
  absl::Status HandBack(Item& item);
  // Before a device bucket's `done`: its queued device work's faults learnt
  // (the host waits only where work is queued since its last wait); a fault
  // fails the bucket naming it, and nothing is handed back. Otherwise
  // HandBack.
  absl::Status EndOnDevice(Item& item);
  // The device path's deferred non-finite count into the bucket's status.
  void TakeRefusal(Item& item);
  // Close's end: device-held slots come back to host memory (a SaveState
  // after close still sees them), the queues go and the backend's pools give
  // what they keep back to the driver.
  void ReleaseDevice() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_mu_);
  // A slot's device-held state into its host vectors; `drop` lets it go.
  static absl::Status SlotToHost(BucketSlot* slot, device::Queue* queue, bool drop);
  // A queue on the device of a slot's state (any made so far), for moving it.
  device::Queue* AnyQueue() const;
  bool OnPipelineThread() const;
  absl::Status AwaitIdle(const char* what) const;

  Agent* const agent_;
  const PipelineOptions options_;
  const Done observer_;
  device::Backend* const backend_;
  // Two: the bucket being prepared and the one exchanging may both be on a
  // device. Each is used by one thread at a time (a bucket's selection, then
  // its exchange); made at a device bucket's first step.
  std::unique_ptr<device::Queue> queues_[2];

  // The selection thread's state; Export/Import take it between buckets.
  mutable absl::Mutex state_mu_;
  SpanStore store_ ABSL_GUARDED_BY(state_mu_);
  std::vector<size_t> step_sizes_ ABSL_GUARDED_BY(state_mu_);  // this step's buckets so far
  std::vector<size_t> last_sizes_ ABSL_GUARDED_BY(state_mu_);  // the last step's
  bool step_open_ ABSL_GUARDED_BY(state_mu_) = false;  // the selection thread's view of the step
  int next_staging_ ABSL_GUARDED_BY(state_mu_) = 0;

  mutable absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  std::deque<Item> ready_ ABSL_GUARDED_BY(mu_);   // selected, not yet exchanging (at most one)
  bool exchanging_ ABSL_GUARDED_BY(mu_) = false;  // the progress thread holds a bucket
  const BucketSlot* exchanging_slot_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool selector_done_ ABSL_GUARDED_BY(mu_) = false;
  int running_ ABSL_GUARDED_BY(mu_) = 0;  // taken from queue_, not yet ended
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;

  std::thread worker_;    // the progress thread
  std::thread selector_;  // the selection thread
};

}  // namespace gradex::pipeline

#endif  // GRADEX_PIPELINE_BUCKET_PIPELINE_H_
