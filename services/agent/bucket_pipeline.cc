#include "services/agent/bucket_pipeline.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "collectives/call_frame.h"
#include "kernels/sparse.h"

namespace gradex::agent {
namespace {

// Replaces NaN and infinite values by 0 (they are exchanged as 0) and says
// how many there were and where the first was.
absl::Status RefusedNonFinite(const std::vector<ParamSpan>& spans, size_t count, size_t first) {
  if (count == 0) return absl::OkStatus();
  size_t at = 0;
  uint64_t key = 0;
  for (const ParamSpan& s : spans) {
    if (first < at + s.elements) {
      key = s.key;
      break;
    }
    at += s.elements;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "gradient has ", count, " NaN or infinite values (first: span ", key, " element ", first - at,
      "); they were exchanged as 0 and the result excludes them"));
}

// Replaces NaN and infinite values by 0 (they are exchanged as 0) and says
// how many there were and where the first was.
absl::Status ZeroNonFinite(const std::vector<ParamSpan>& spans, std::span<float> data,
                           size_t* count) {
  size_t first = 0;
  *count = kernels::ZeroNonFinite(data.data(), data.size(), &first);
  return RefusedNonFinite(spans, *count, first);
}

size_t Elements(const std::vector<ParamSpan>& spans) {
  size_t n = 0;
  for (const ParamSpan& s : spans) n += s.elements;
  return n;
}

}  // namespace

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
  (void)AccumulateIntoResidual(item.host, (*slot)->residual);
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

void BucketPipeline::Select(Item& item) {
  const size_t n = Elements(item.end.spans);
  auto refuse = [&](absl::Status s) {
    WaitTurn(!options_.pipeline, {});
    item.end.select_start = item.end.select_end = std::chrono::system_clock::now();
    item.status = std::move(s);
  };
  if (n != item.data.size() || n == 0) {
    refuse(absl::InvalidArgumentError(absl::StrCat(
        "bucket: its spans cover ", n, " elements, its data holds ", item.data.size())));
  } else if (n > options_.max_bucket_elements) {
    refuse(absl::InvalidArgumentError(absl::StrCat("bucket of ", n, " elements: over ",
                                                   options_.max_bucket_elements,
                                                   " (ClientOptions.max_bucket_elements)")));
  } else if (!item.handover_status.ok()) {
    refuse(item.handover_status);
  } else {
    // A new step opens only when the previous one has ended (BeginStep and
    // EndStep never overlap the other thread); a bucket whose gathering
    // would touch the exchanging bucket's slot (DDP's rebuild moves spans
    // between layouts) waits for that exchange; without the pipeline every
    // bucket does.
    WaitTurn(!options_.pipeline || !step_open_, store_.Touched(item.end.spans));
    item.end.select_start = std::chrono::system_clock::now();
    // The queue neither thread uses now: the bucket exchanging, if any,
    // took the other.
    device::Queue* queue = nullptr;
    absl::Status moved;
    if (item.memory == Memory::kDevice) {
      absl::StatusOr<device::Queue*> q = QueueFor(next_staging_, item);
      if (q.ok()) {
        queue = *q;
        item.queue = queue;
        item.staging = next_staging_;
        next_staging_ ^= 1;
      } else {
        moved = q.status();
      }
    }
    const device::QueueCounters before =
        queue != nullptr ? queue->counters() : device::QueueCounters{};
    // Gather moves state in host memory: device-held state of the slots it
    // moves comes back first.
    for (BucketSlot* moving : store_.Moves(item.end.spans)) {
      if (moved.ok()) {
        moved = SlotToHost(moving, queue != nullptr ? queue : AnyQueue(), /*drop=*/true);
      }
    }
    absl::StatusOr<BucketSlot*> slot = moved.ok() ? store_.Gather(item.end.spans) : moved;
    if (!slot.ok()) {
      item.status = slot.status();
    } else {
      const bool momentum = options_.momentum > 0 && item.writable;
      if (!step_open_) {
        // A step the caller opened (Agent::Step) is used as is; one that
        // cannot begin (no epoch within the timeout) fails its buckets in
        // ExchangeBucket, which keeps their gradients.
        if (!agent_->step_open()) (void)agent_->BeginStep();
        step_sizes_.clear();
        step_open_ = true;
      }
      item.end.step = agent_->next_step();
      item.end.index = static_cast<uint32_t>(std::min<size_t>(step_sizes_.size(), kMaxStepBuckets));
      if (item.end.index >= kMaxStepBuckets) {
        step_sizes_.push_back(n);
        item.status = ToHostPath(item, *slot, queue);
        if (item.status.ok()) {
          if (momentum) AddMomentum(item, *slot);
          (void)AccumulateIntoResidual(item.host, (*slot)->residual);
          item.status = absl::InvalidArgumentError(absl::StrCat(
              "over ", kMaxStepBuckets,
              " buckets in one step (is last_in_step ever set?); kept in the residual"));
        }
      } else {
        // COVAP counts parts across the step's buckets: the last step's
        // sizes, the same on every rank, when this bucket matches them.
        std::span<const size_t> sizes;
        if (item.end.index < last_sizes_.size() && last_sizes_[item.end.index] == n)
          sizes = last_sizes_;
        item.call = std::make_unique<BucketCall>();
        BucketCall* call = item.call.get();
        agent_->PlanBucket(item.end.index, sizes, item.data, *slot, call);
        const bool runs = !call->refused && call->status.ok() && call->schedule != nullptr;
        const auto& live = (*slot)->velocity_live;
        const bool all_live = std::all_of(live.begin(), live.end(), [](uint8_t v) { return v; });
        // The device path where the call runs on an algorithm whose local
        // part has a device form and the momentum (if any) needs no u = g
        // seeding; otherwise whole-bucket staging, as a host bucket, with a
        // device-resident slot left on the device (a dense probe, a
        // fallback).
        const bool refuse = agent_->rules().refuse_nonfinite && item.writable;
        size_t first = 0;
        absl::Status path = absl::FailedPreconditionError("host");
        if (queue != nullptr && runs && call->schedule->DeviceResidual(call->ctx, call->options) &&
            (!momentum || all_live)) {
          path = ToDevicePath(item, *slot, queue);
        } else if (queue != nullptr && (*slot)->device != nullptr && item.writable &&
                   (!momentum || all_live)) {
          path = ToStagedPath(item, *slot, queue, momentum, refuse, &first);
        }
        if (!path.ok() && !item.staged) path = ToHostPath(item, *slot, queue);
        if (!path.ok()) {
          // Nothing of the bucket reached its residual: it fails alone, its
          // index unused (as a bucket refused before the step).
          item.call.reset();
          item.status = std::move(path);
        } else {
          step_sizes_.push_back(n);
          const bool device = item.device_residual && !item.staged;
          // Refused values are zeroed in the gradient, before the momentum
          // correction: one never reaches the velocity.
          if (item.staged) {
            // Zeroed on the device before the accumulation (ToStagedPath).
            if (refuse) item.status = RefusedNonFinite(item.end.spans, item.end.nonfinite, first);
          } else if (refuse) {
            if (device) {
              absl::StatusOr<size_t> count = queue->ZeroNonFinite(item.data, &first);
              item.status =
                  count.ok() ? RefusedNonFinite(item.end.spans, *count, first) : count.status();
              if (count.ok()) item.end.nonfinite = *count;
            } else {
              item.status = ZeroNonFinite(item.end.spans, item.host, &item.end.nonfinite);
            }
          }
          if (momentum && !item.staged) {
            // The call fuses the correction into its first pass over the
            // residual where its local part will run and every span has a
            // velocity; otherwise (a span's first step: u = g) it is written
            // over the gradient here.
            if (device) {
              call->velocity = (*slot)->device->velocity->span();
              call->momentum = static_cast<float>(options_.momentum);
            } else if (runs && all_live && (*slot)->velocity.size() == n) {
              call->velocity = (*slot)->velocity;
              call->momentum = static_cast<float>(options_.momentum);
            } else {
              AddMomentum(item, *slot);
            }
          }
          Agent::PrepareBucket(call);
        }
      }
    }
    if (queue != nullptr) {
      const device::QueueCounters& now = queue->counters();
      item.end.device_to_host_bytes = now.to_host_bytes - before.to_host_bytes;
      item.end.host_to_device_bytes = now.to_device_bytes - before.to_device_bytes;
      item.end.device_waits = now.host_waits - before.host_waits;
    }
    item.end.select_end = std::chrono::system_clock::now();
  }
  if (item.last_in_step && step_open_) {
    last_sizes_ = std::move(step_sizes_);
    step_sizes_.clear();
    step_open_ = false;
  }
}

absl::Status BucketPipeline::Finish(Item& item, BucketOutcome* out) {
  device::Queue* queue = item.queue;
  const device::QueueCounters before =
      queue != nullptr ? queue->counters() : device::QueueCounters{};
  absl::Status s = FinishCall(item, out);
  if (queue != nullptr) {
    // The result goes to the trainer's stream by an event (also when nothing
    // was written: its reads of the bucket are then ordered too).
    absl::Status back = HandBack(item);
    if (s.ok()) s = std::move(back);
    const device::QueueCounters& now = queue->counters();
    item.end.device_to_host_bytes += now.to_host_bytes - before.to_host_bytes;
    item.end.host_to_device_bytes += now.to_device_bytes - before.to_device_bytes;
    item.end.device_waits += now.host_waits - before.host_waits;
  }
  return s;
}

absl::Status BucketPipeline::FinishCall(Item& item, BucketOutcome* out) {
  if (item.call == nullptr) return item.status;
  if (item.device_residual && !item.staged) {
    // The device path: the exchange's residual updates and the result's COO
    // go up.
    absl::Status s = agent_->ExchangeBucket(item.call.get(), out);
    absl::Status residual = s.ok() ? NonFiniteResidual(item.end.index, out->stats) : s;
    if (s.ok()) s = FinishOnDevice(item, *out, residual.ok());
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
  if (options_.mean) {
    const float world = static_cast<float>(agent_->plan()->world());
    for (float& v : item.host) v /= world;
  }
  // DGC's factor masking after a sparse exchange (fewer than half of the
  // result's entries applied): a sent entry's velocity restarts from 0.
  // Dense steps (start_iter, probes, fallbacks) keep their momentum.
  bool mask = item.status.ok() && residual.ok() && options_.momentum > 0 && options_.factor_masking;
  if (mask) {
    size_t applied = 0;
    for (float v : item.host) applied += v != 0.0f;
    mask = 2 * applied < item.host.size();
  }
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

}  // namespace gradex::agent
