// The selection thread's half of a bucket (BucketPipeline::Select): checks,
// the bucket's queue (device buckets), its slot, the step, the plan, the way
// its data reaches the exchange (bucket_pipeline_device.cc), the refusal of
// non-finite values and the momentum correction, then the call's local part.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/call_frame.h"
#include "kernels/sparse.h"
#include "pipeline/bucket_pipeline.h"

namespace gradex::pipeline {
namespace {

// Says how many NaN and infinite values were exchanged as 0 and where the
// first was.
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

}  // namespace

size_t BucketPipeline::Elements(const std::vector<ParamSpan>& spans) {
  size_t n = 0;
  for (const ParamSpan& s : spans) n += s.elements;
  return n;
}

void BucketPipeline::Select(Item& item) {
  const size_t n = Elements(item.end.spans);
  absl::Status refused;
  if (n != item.data.size() || n == 0) {
    refused = absl::InvalidArgumentError(absl::StrCat(
        "bucket: its spans cover ", n, " elements, its data holds ", item.data.size()));
  } else if (n > options_.max_bucket_elements) {
    refused = absl::InvalidArgumentError(absl::StrCat("bucket of ", n, " elements: over ",
                                                      options_.max_bucket_elements,
                                                      " (ClientOptions.max_bucket_elements)"));
  } else if (!item.handover_status.ok()) {
    refused = item.handover_status;
  }
  if (!refused.ok()) {
    WaitTurn(!options_.pipeline, {});
    item.end.select_start = item.end.select_end = std::chrono::system_clock::now();
    item.status = std::move(refused);
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
    absl::Status queued;
    if (item.memory == Memory::kDevice) {
      // A step starts on queue 0 (the previous step has ended: both are
      // free), so a steady layout puts each bucket on the same queue every
      // step and the first steps size each queue's staging for good.
      const int staging = step_open_ ? next_staging_ : 0;
      absl::StatusOr<device::Queue*> q = QueueFor(staging, item);
      if (q.ok()) {
        item.queue = *q;
        item.staging = staging;
        next_staging_ = staging ^ 1;
      } else {
        queued = q.status();
      }
    }
    const device::QueueCounters before =
        item.queue != nullptr ? item.queue->counters() : device::QueueCounters{};
    absl::StatusOr<BucketSlot*> slot = queued.ok() ? GatherSlot(item) : queued;
    if (!slot.ok()) {
      item.status = slot.status();
    } else {
      OpenStep();
      item.end.step = agent_->next_step();
      item.end.index = static_cast<uint32_t>(std::min<size_t>(step_sizes_.size(), kMaxStepBuckets));
      if (item.end.index >= kMaxStepBuckets) {
        KeepOverflow(item, *slot);
      } else {
        PlanAndPrepare(item, *slot);
      }
    }
    if (item.queue != nullptr) AddDeviceWork(before, *item.queue, &item.end);
    item.end.select_end = std::chrono::system_clock::now();
  }
  if (item.last_in_step && step_open_) {
    last_sizes_ = std::move(step_sizes_);
    step_sizes_.clear();
    step_open_ = false;
  }
}

absl::StatusOr<BucketSlot*> BucketPipeline::GatherSlot(Item& item) {
  // Gather moves state in host memory: device-held state of the slots it
  // moves comes back first.
  for (BucketSlot* moving : store_.Moves(item.end.spans)) {
    device::Queue* queue = item.queue != nullptr ? item.queue : AnyQueue();
    if (absl::Status s = SlotToHost(moving, queue, /*drop=*/true); !s.ok()) return s;
  }
  return store_.Gather(item.end.spans);
}

void BucketPipeline::TakeRefusal(Item& item) {
  if (!item.refusal_pending) return;
  item.refusal_pending = false;
  size_t first = 0;
  absl::StatusOr<size_t> count = item.queue->TakeNonFinite(&first);
  if (!count.ok()) {
    if (item.status.ok()) item.status = count.status();
    return;
  }
  item.end.nonfinite = *count;
  if (item.status.ok()) item.status = RefusedNonFinite(item.end.spans, *count, first);
}

void BucketPipeline::OpenStep() {
  if (step_open_) return;
  // A step the caller opened (WholeStep::Run) is used as is; one that cannot
  // begin (no epoch within the timeout) fails its buckets in
  // ExchangeBucket, which keeps their gradients.
  if (!agent_->step_open()) (void)agent_->BeginStep();
  step_sizes_.clear();
  step_open_ = true;
}

void BucketPipeline::KeepOverflow(Item& item, BucketSlot* slot) {
  step_sizes_.push_back(item.data.size());
  item.status = ToHostPath(item, slot, item.queue);
  if (!item.status.ok()) return;
  if (options_.momentum > 0 && item.writable) AddMomentum(item, slot);
  (void)collectives::AccumulateIntoResidual(item.host, slot->residual);
  item.status = absl::InvalidArgumentError(
      absl::StrCat("over ", kMaxStepBuckets,
                   " buckets in one step (is last_in_step ever set?); kept in the residual"));
}

void BucketPipeline::PlanAndPrepare(Item& item, BucketSlot* slot) {
  const size_t n = item.data.size();
  const bool momentum = options_.momentum > 0 && item.writable;
  device::Queue* queue = item.queue;
  // COVAP counts parts across the step's buckets: the last step's sizes,
  // the same on every rank, when this bucket matches them.
  std::span<const size_t> sizes;
  if (item.end.index < last_sizes_.size() && last_sizes_[item.end.index] == n) sizes = last_sizes_;
  item.call = std::make_unique<BucketCall>();
  BucketCall* call = item.call.get();
  agent_->PlanBucket(item.end.index, sizes, item.data, slot, call);
  const bool runs = !call->refused && call->status.ok() && call->schedule != nullptr;
  const auto& live = slot->velocity_live;
  const bool all_live = std::all_of(live.begin(), live.end(), [](uint8_t v) { return v; });
  // The device path where the call runs on an algorithm whose local part
  // has a device form and the momentum (if any) needs no u = g seeding;
  // otherwise whole-bucket staging, as a host bucket, with a
  // device-resident slot left on the device (a dense probe, a fallback).
  const bool refuse = agent_->rules().refuse_nonfinite && item.writable;
  size_t first = 0;
  absl::Status path = absl::FailedPreconditionError("host");
  if (queue != nullptr && runs && call->schedule->DeviceResidual(call->ctx, call->options) &&
      (!momentum || all_live)) {
    path = ToDevicePath(item, slot, queue);
  } else if (queue != nullptr && slot->device != nullptr && item.writable &&
             (!momentum || all_live)) {
    path = ToStagedPath(item, slot, queue, momentum, refuse, &first);
  }
  if (!path.ok() && !item.staged) path = ToHostPath(item, slot, queue);
  if (!path.ok()) {
    // Nothing of the bucket reached its residual (or, staged, all of it
    // stays in the device residual): it fails alone, its index unused (as
    // a bucket refused before the step).
    item.call.reset();
    item.status = std::move(path);
    return;
  }
  step_sizes_.push_back(n);
  const bool device = item.device_residual && !item.staged;
  // Refused values are zeroed in the gradient, before the momentum
  // correction: one never reaches the velocity.
  if (item.staged) {
    // Zeroed on the device before the accumulation (ToStagedPath).
    if (refuse) item.status = RefusedNonFinite(item.end.spans, item.end.nonfinite, first);
  } else if (refuse && device) {
    // Zeroed on the device now, counted with the selection's wait: the
    // refusal fails the bucket only after its exchange (TakeRefusal).
    item.status = queue->ZeroNonFiniteLater(item.data);
    item.refusal_pending = item.status.ok();
  } else if (refuse) {
    const size_t count = kernels::ZeroNonFinite(item.host.data(), item.host.size(), &first);
    item.status = RefusedNonFinite(item.end.spans, count, first);
    item.end.nonfinite = count;
  }
  if (momentum && !item.staged) {
    // The call fuses the correction into its first pass over the residual
    // where its local part will run and every span has a velocity;
    // otherwise (a span's first step: u = g) it is written over the
    // gradient here. (Staged, it was applied on the device.)
    if (device) {
      call->velocity = slot->device->velocity->span();
      call->momentum = static_cast<float>(options_.momentum);
    } else if (runs && all_live && slot->velocity.size() == n) {
      call->velocity = slot->velocity;
      call->momentum = static_cast<float>(options_.momentum);
    } else {
      AddMomentum(item, slot);
    }
  }
  Agent::PrepareBucket(call);
}

}  // namespace gradex::pipeline
