#include "pipeline/bucket_pipeline.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "collectives/call_frame.h"
#include "kernels/sparse.h"
#include "pipeline/bucket_result.h"

namespace gradex::pipeline {

BucketPipeline::BucketPipeline(Agent* agent, PipelineOptions options, Done observer)
    : agent_(agent),
      options_(std::move(options)),
      observer_(std::move(observer)),
      backend_(options_.device != nullptr ? options_.device : device::DefaultBackend()) {
  worker_ = std::thread([this] { ExchangeLoop(); });
  selector_ = std::thread([this] { SelectLoop(); });
}

BucketPipeline::~BucketPipeline() { (void)Close(); }

bool BucketPipeline::OnPipelineThread() const {
  return std::this_thread::get_id() == worker_.get_id() ||
         std::this_thread::get_id() == selector_.get_id();
}

std::future<BucketEnd> BucketPipeline::Submit(std::vector<ParamSpan> spans, std::span<float> data,
                                              Memory memory, bool last_in_step, Done done,
                                              uintptr_t stream) {
  Item item;
  item.end.spans = std::move(spans);
  item.data = data;
  item.memory = memory;
  item.stream = stream;
  if (memory == Memory::kDevice) {
    // On the trainer's thread, the default stream included: gradex's queue
    // waits for this point, the trainer never does.
    absl::StatusOr<std::shared_ptr<device::Event>> h = backend_->RecordCaller(stream, data.data());
    if (h.ok()) {
      item.handover = *std::move(h);
    } else {
      item.handover_status = h.status();
    }
  }
  item.last_in_step = last_in_step;
  item.done = std::move(done);
  return Queue(std::move(item));
}

std::future<BucketEnd> BucketPipeline::Submit(std::vector<ParamSpan> spans,
                                              std::span<const float> grad, bool last_in_step,
                                              Done done) {
  Item item;
  item.end.spans = std::move(spans);
  // Never written: Select and Finish check `writable` before any write.
  item.data = {const_cast<float*>(grad.data()), grad.size()};
  item.writable = false;
  item.last_in_step = last_in_step;
  item.done = std::move(done);
  return Queue(std::move(item));
}

std::future<BucketEnd> BucketPipeline::Queue(Item item) {
  item.promise = std::make_shared<std::promise<BucketEnd>>();
  std::future<BucketEnd> f = item.promise->get_future();
  item.end.elements = item.data.size();
  item.end.queued = std::chrono::system_clock::now();
  {
    absl::MutexLock lock(&mu_);
    if (!closing_) {
      queue_.push_back(std::move(item));
      return f;
    }
  }
  BucketEnd& end = item.end;
  end.status = absl::FailedPreconditionError("gradex client is closed");
  if (item.done) item.done(end);
  item.promise->set_value(std::move(end));
  return f;
}

absl::Status BucketPipeline::AwaitIdle(const char* what) const {
  if (OnPipelineThread()) {
    return absl::FailedPreconditionError(
        absl::StrCat("gradex ", what, " from a bucket's done callback would wait for itself"));
  }
  absl::MutexLock lock(&mu_);
  auto idle = [this]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.empty() && running_ == 0; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&idle), absl::FromChrono(options_.timeout))) {
    return absl::DeadlineExceededError(absl::StrCat("gradex ", what, ": ", queue_.size() + running_,
                                                    " buckets still pending after ",
                                                    options_.timeout.count(), " ms"));
  }
  return absl::OkStatus();
}

absl::Status BucketPipeline::Flush() { return AwaitIdle("Flush"); }

void BucketPipeline::AddMomentum(const Item& item, BucketSlot* slot) const {
  // As torch's u.mul_(m).add_(g): two roundings, never a fused multiply-add,
  // so the velocity is the bits the optimizer's momentum would hold.
  const float m = static_cast<float>(options_.momentum);
  size_t off = 0;
  for (size_t s = 0; s < item.end.spans.size(); ++s) {
    const size_t n = item.end.spans[s].elements;
    float* g = item.host.data() + off;
    float* u = slot->velocity.data() + off;
    if (!slot->velocity_live[s]) {
      std::copy(g, g + n, u);  // a span's first step: u = g
      slot->velocity_live[s] = 1;
    } else {
      for (size_t i = 0; i < n; ++i) {
        u[i] = u[i] * m + g[i];  // built with -ffp-contract=off (CMakeLists.txt)
        g[i] = u[i];
      }
    }
    off += n;
  }
}

void BucketPipeline::KeepUnrun(Item& item) {
  const size_t n = Elements(item.end.spans);
  if (n != item.data.size() || n == 0 || n > options_.max_bucket_elements) return;
  device::Queue* queue = nullptr;
  if (item.memory == Memory::kDevice) {
    absl::StatusOr<device::Queue*> q = QueueFor(0, item);
    if (!q.ok()) return;
    queue = *q;
    item.staging = 0;
  }
  for (BucketSlot* moving : store_.Moves(item.end.spans)) {
    if (!SlotToHost(moving, queue != nullptr ? queue : AnyQueue(), /*drop=*/true).ok()) return;
  }
  absl::StatusOr<BucketSlot*> slot = store_.Gather(item.end.spans);
  if (!slot.ok()) return;
  if (!ToHostPath(item, *slot, queue).ok()) return;
  if (options_.momentum > 0 && item.writable) AddMomentum(item, *slot);
  (void)collectives::AccumulateIntoResidual(item.host, (*slot)->residual);
}

absl::Status BucketPipeline::Close() {
  if (OnPipelineThread()) {
    return absl::FailedPreconditionError(
        "gradex Close from a bucket's done callback (the progress thread); close from the "
        "trainer's thread");
  }
  std::deque<Item> left;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return absl::OkStatus();
    closed_ = closing_ = true;
    left.swap(queue_);
  }
  // The bucket being selected is handed over, the bucket exchanging ends
  // first; a selected bucket not yet exchanging is given up (kept in its
  // residual, CANCELLED) by the progress thread.
  if (selector_.joinable()) selector_.join();
  if (worker_.joinable()) worker_.join();
  {
    absl::MutexLock lock(&state_mu_);
    for (Item& item : left) KeepUnrun(item);
    if (agent_->step_open()) (void)agent_->EndStep(nullptr);
    step_open_ = false;
    ReleaseDevice();
  }
  for (Item& item : left) {
    BucketEnd& end = item.end;
    end.status = absl::CancelledError(
        "gradex client closed before the bucket was exchanged (kept in its residual)");
    end.select_start = end.select_end = end.exchange_start = end.end =
        std::chrono::system_clock::now();
    if (item.done) item.done(end);  // never selected: the observer does not see it
    item.promise->set_value(std::move(end));
  }
  return absl::OkStatus();
}

absl::StatusOr<SpanState> BucketPipeline::Export() {
  // The buckets issued so far end first (their residuals are being written).
  if (absl::Status s = AwaitIdle("SaveState"); !s.ok()) return s;
  absl::MutexLock lock(&state_mu_);
  if (step_open_) {
    return absl::FailedPreconditionError(
        "SaveState inside a step (its last bucket, last_in_step, has not run yet)");
  }
  // Device-held state is read into the host vectors and stays on the
  // device.
  for (BucketSlot* slot : store_.Slots()) {
    if (absl::Status s = SlotToHost(slot, AnyQueue(), /*drop=*/false); !s.ok()) return s;
  }
  return store_.Export();
}

absl::Status BucketPipeline::Import(SpanState state, std::optional<uint64_t> step) {
  {
    absl::MutexLock lock(&mu_);
    if (!queue_.empty()) {
      return absl::FailedPreconditionError("LoadState while buckets are queued (Flush first)");
    }
  }
  if (absl::Status s = AwaitIdle("LoadState"); !s.ok()) return s;
  absl::MutexLock lock(&state_mu_);
  if (step_open_) {
    return absl::FailedPreconditionError(
        "LoadState inside a step (its last bucket, last_in_step, has not run yet)");
  }
  if (absl::Status s = store_.Import(std::move(state)); !s.ok()) return s;
  // Before the first epoch the step comes from the checkpoint; later the
  // running step is kept (ranks agree on it in-band).
  if (step) (void)agent_->set_next_step(*step);
  return absl::OkStatus();
}

void BucketPipeline::SelectLoop() {
  for (;;) {
    Item item;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || closing_; };
      mu_.Await(absl::Condition(&ready));
      if (closing_) {  // Close keeps what is left in the queue
        selector_done_ = true;
        return;
      }
      item = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
    }
    {
      absl::MutexLock lock(&state_mu_);
      Select(item);
    }
    absl::MutexLock lock(&mu_);
    ready_.push_back(std::move(item));
  }
}

void BucketPipeline::WaitTurn(bool idle, const std::vector<const BucketSlot*>& touched) {
  absl::MutexLock lock(&mu_);
  auto turn = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!ready_.empty()) return false;  // the previous bucket is not exchanging yet
    if (!exchanging_) return true;
    return !idle && std::find(touched.begin(), touched.end(), exchanging_slot_) == touched.end();
  };
  // Bounded by the exchange in progress, which its deadline bounds.
  mu_.Await(absl::Condition(&turn));
}

absl::Status BucketPipeline::Finish(Item& item, BucketOutcome* out) {
  device::Queue* queue = item.queue;
  const device::QueueCounters before =
      queue != nullptr ? queue->counters() : device::QueueCounters{};
  absl::Status s = FinishCall(item, out);
  if (queue != nullptr) {
    // The result goes to the trainer's stream by an event (also when nothing
    // was written: its reads of the bucket are then ordered too), once the
    // bucket's device work is known not to have faulted.
    absl::Status back = EndOnDevice(item);
    if (s.ok() || item.device_fault) s = std::move(back);
    AddDeviceWork(before, *queue, &item.end);
    item.end.device_pool_bytes = backend_->Pools().held;
  }
  return s;
}

void BucketPipeline::AddDeviceWork(const device::QueueCounters& before, const device::Queue& queue,
                                   BucketEnd* end) {
  const device::QueueCounters& now = queue.counters();
  end->device_to_host_bytes += now.to_host_bytes - before.to_host_bytes;
  end->host_to_device_bytes += now.to_device_bytes - before.to_device_bytes;
  end->device_waits += now.host_waits - before.host_waits;
  end->device_syncs += now.device_syncs - before.device_syncs;
  end->device_allocations += now.allocations - before.allocations;
}

absl::Status BucketPipeline::FinishCall(Item& item, BucketOutcome* out) {
  if (item.call == nullptr) return item.status;
  if (item.device_residual && !item.staged) {
    // The device path: the exchange's residual updates and the result's COO
    // go up, the result before the agent reads the residual's norm, so that
    // one wait brings the norm and any fault of the result's writes.
    bool written = false;
    absl::Status write;
    item.call->on_result = [&](const BucketOutcome& o) {
      TakeRefusal(item);
      write = FinishOnDevice(item, o, NonFiniteResidual(item.end.index, o.stats).ok());
      written = true;
    };
    absl::Status s = agent_->ExchangeBucket(item.call.get(), out);
    item.call->on_result = nullptr;
    TakeRefusal(item);
    absl::Status residual = s.ok() ? NonFiniteResidual(item.end.index, out->stats) : s;
    if (s.ok()) s = written ? write : FinishOnDevice(item, *out, residual.ok());
    if (!s.ok()) return s;
    if (!item.status.ok()) return item.status;
    return residual;
  }
  absl::Status s = agent_->ExchangeBucket(item.call.get(), out);
  if (!s.ok()) {
    // The device data is untouched; what the call kept goes back to a
    // resident slot.
    if (item.staged) (void)FinishStaged(item, /*mask=*/false);
    return s;
  }
  // Fails the bucket after its exchange (the peers are not held): its
  // residual had NaN or Inf entries, now 0.
  absl::Status residual = NonFiniteResidual(item.end.index, out->stats);
  if (!item.writable) return residual;
  out->result.ToDense(item.host);
  ScaleForMean(item.host, options_.mean, static_cast<float>(agent_->plan()->world()));
  // The count is a pass over the bucket: taken only where masking is on.
  const bool mask = FactorMaskingOn(item, residual.ok()) &&
                    SparseResult(CountApplied(item.host), item.host.size());
  if (item.staged) {
    if (absl::Status f = FinishStaged(item, mask); !f.ok()) return f;
  } else if (mask) {
    std::vector<float>& u = item.call->slot->velocity;
    for (size_t i = 0; i < item.host.size(); ++i) {
      if (item.host[i] != 0.0f) u[i] = 0.0f;
    }
  }
  if (item.queue != nullptr) {
    if (absl::Status d = item.queue->StageToDevice(item.data); !d.ok()) return d;
  }
  if (!item.status.ok()) return item.status;  // the non-finite refusal, if any
  return residual;
}

void BucketPipeline::ExchangeLoop() {
  for (;;) {
    Item item;
    bool cancel = false;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !ready_.empty() || (closing_ && selector_done_);
      };
      mu_.Await(absl::Condition(&ready));
      if (ready_.empty()) return;
      item = std::move(ready_.front());
      ready_.pop_front();
      exchanging_ = true;
      exchanging_slot_ = item.call != nullptr ? item.call->slot : nullptr;
      cancel = closing_;
      // Under the lock: the next bucket's selection starts after this.
      item.end.exchange_start = std::chrono::system_clock::now();
    }
    BucketEnd& end = item.end;
    if (cancel) {
      if (item.call != nullptr) Agent::AbandonBucket(item.call.get());
      if (item.call != nullptr && item.staged) (void)FinishStaged(item, /*mask=*/false);
      if (item.queue != nullptr) (void)HandBack(item);
      end.status = absl::CancelledError(
          "gradex client closed before the bucket was exchanged (kept in its residual)");
    } else {
      end.status = Finish(item, &end.outcome);
    }
    if (item.call != nullptr && item.call->slot != nullptr) {
      // An exchanged bucket's norm was taken by the agent (one pass).
      end.residual_l2 = item.call->state == BucketCall::State::kDone ? end.outcome.residual_l2
                                                                     : CallResidualL2(*item.call);
    }
    if (item.last_in_step && agent_->step_open()) {
      end.step_status = agent_->EndStep(&end.step_outcome);
    }
    end.end = std::chrono::system_clock::now();
    if (observer_) observer_(end);
    if (item.done) item.done(end);
    item.promise->set_value(std::move(end));
    absl::MutexLock lock(&mu_);
    exchanging_ = false;
    exchanging_slot_ = nullptr;
    --running_;
  }
}

}  // namespace gradex::pipeline
