// The bucket pipeline's ways for a Memory::kDevice bucket's data
// (BucketPipeline::Select chooses per bucket and step): the device path,
// where the slot's residual and velocity live on the bucket's GPU and only
// O(k) crosses PCIe; the staged path, where a host call (a dense probe, a
// fallback) takes the device-resident residual staged down once and the
// slot stays resident; and the host path, where a device bucket is staged
// whole and a device-held slot's state comes back first. All device work
// goes through a device::Queue; the trainer's stream is ordered by events.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pipeline/bucket_pipeline.h"
#include "pipeline/bucket_result.h"

namespace gradex::pipeline {

const char* DevicePathName(DevicePath path) {
  switch (path) {
    case DevicePath::kHost:
      return "host";
    case DevicePath::kWholeBucketStaging:
      return "whole-bucket staging";
    case DevicePath::kDeviceSelection:
      return "device selection";
  }
  return "unknown";
}

absl::StatusOr<device::Queue*> BucketPipeline::QueueFor(int i, const Item& item) {
  absl::StatusOr<device::PointerInfo> info = backend_->Classify(item.data.data());
  if (!info.ok()) return info.status();
  if (!info->device || info->ordinal < 0) {
    return absl::InvalidArgumentError(
        "Memory::kDevice: the bucket is not device memory of one device (pass Memory::kHost for "
        "host memory)");
  }
  std::unique_ptr<device::Queue>& q = queues_[i];
  if (q == nullptr || q->device() != info->ordinal) {
    absl::StatusOr<std::unique_ptr<device::Queue>> made = backend_->NewQueue(item.data.data());
    if (!made.ok()) return made.status();
    q = *std::move(made);
  }
  if (item.handover != nullptr) {
    if (absl::Status s = q->Wait(*item.handover); !s.ok()) return s;
  }
  return q.get();
}

device::Queue* BucketPipeline::AnyQueue() const {
  return queues_[0] != nullptr ? queues_[0].get() : queues_[1].get();
}

absl::Status BucketPipeline::SlotToHost(BucketSlot* slot, device::Queue* queue, bool drop) {
  if (slot->device == nullptr) return absl::OkStatus();
  DeviceResiduals& d = *slot->device;
  absl::Status s = queue != nullptr
                       ? absl::OkStatus()
                       : absl::InternalError("a device-resident slot without a device queue");
  if (s.ok() && d.last != nullptr) s = queue->Wait(*d.last);
  if (s.ok()) {
    slot->residual.resize(d.residual->size());
    s = queue->CopyToHost(d.residual->span(), slot->residual);
  }
  if (s.ok() && d.velocity != nullptr) {
    slot->velocity.resize(d.velocity->size());
    s = queue->CopyToHost(d.velocity->span(), slot->velocity);
  }
  if (!s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("copying a bucket's residual back from its GPU: ", s.message()));
  }
  if (drop) {
    slot->device.reset();
  } else {
    // Later work on the slot follows these reads (they waited anyway).
    absl::StatusOr<std::shared_ptr<device::Event>> e = queue->Record();
    if (!e.ok()) return e.status();
    d.last = *std::move(e);
  }
  return absl::OkStatus();
}

absl::Status BucketPipeline::ToHostPath(Item& item, BucketSlot* slot, device::Queue* queue) {
  if (absl::Status s = SlotToHost(slot, queue != nullptr ? queue : AnyQueue(), /*drop=*/true);
      !s.ok()) {
    return s;
  }
  item.device_residual = false;
  item.host = item.data;
  if (item.memory != Memory::kDevice) return absl::OkStatus();
  if (queue == nullptr) return absl::InternalError("a device bucket without a device queue");
  absl::StatusOr<std::span<float>> host = queue->StageToHost(item.data);
  if (!host.ok()) return host.status();
  item.host = *host;
  item.end.device_path = DevicePath::kWholeBucketStaging;
  if (item.call != nullptr) item.call->grad = item.host;
  return absl::OkStatus();
}

absl::Status BucketPipeline::ToDevicePath(Item& item, BucketSlot* slot, device::Queue* queue) {
  const size_t n = item.data.size();
  if (slot->device == nullptr) {
    // The slot's first device step (or its first after a host one): its
    // state moves up once. The velocity exists only with momentum.
    const bool momentum = options_.momentum > 0;
    auto d = std::make_shared<DeviceResiduals>();
    absl::StatusOr<std::unique_ptr<device::Buffer>> r = queue->Allocate(n);
    if (!r.ok()) return r.status();
    d->residual = *std::move(r);
    if (momentum) {
      absl::StatusOr<std::unique_ptr<device::Buffer>> v = queue->Allocate(n);
      if (!v.ok()) return v.status();
      d->velocity = *std::move(v);
    }
    // Zeros (an empty host vector, a fresh slot) are what the new buffers
    // hold already: no upload, no wait.
    auto zeros = [](const std::vector<float>& v) {
      return std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; });
    };
    absl::Status s;
    if (!zeros(slot->residual)) s = queue->Upload(slot->residual, d->residual->span());
    if (s.ok() && momentum && !zeros(slot->velocity)) {
      s = queue->Upload(slot->velocity, d->velocity->span());
    }
    if (!s.ok()) return s;
    slot->device = std::move(d);
  } else if (slot->device->last != nullptr) {
    if (absl::Status s = queue->Wait(*slot->device->last); !s.ok()) return s;
  }
  if (slot->device->residual->size() != n) {
    return absl::InternalError(absl::StrCat("a device residual of ", slot->device->residual->size(),
                                            " elements for a bucket of ", n));
  }
  item.device_residual = true;
  item.host = {};
  item.end.device_path = DevicePath::kDeviceSelection;
  item.call->grad = item.data;
  item.call->residual = slot->device->residual->span();
  item.call->memory = queue;
  return absl::OkStatus();
}

absl::Status BucketPipeline::ToStagedPath(Item& item, BucketSlot* slot, device::Queue* queue,
                                          bool momentum, bool refuse, size_t* first) {
  DeviceResiduals& d = *slot->device;
  const size_t n = item.data.size();
  if (d.residual->size() != n || (momentum && (d.velocity == nullptr || d.velocity->size() != n))) {
    return absl::FailedPreconditionError("the slot's device state does not match the bucket");
  }
  if (d.last != nullptr) {
    if (absl::Status s = queue->Wait(*d.last); !s.ok()) return s;
  }
  // The refusal's count rides on the staging's wait: one wait for all.
  if (refuse) {
    if (absl::Status s = queue->ZeroNonFiniteLater(item.data); !s.ok()) return s;
  }
  // From here on the device residual holds the bucket's contribution: a
  // failure fails the bucket with it kept there.
  item.staged = true;
  item.device_residual = true;
  item.end.device_path = DevicePath::kWholeBucketStaging;
  // The arithmetic the host call frame would do (residual += m*u + g), on
  // the device; the call then adds the staged values to zeros, which leaves
  // them as they are (a residual is never -0).
  if (absl::Status s = queue->AccumulateLater(item.data, d.residual->span(),
                                              momentum ? d.velocity->span() : std::span<float>(),
                                              static_cast<float>(options_.momentum));
      !s.ok()) {
    return s;
  }
  absl::StatusOr<std::span<float>> host = queue->StageToHost(d.residual->span());
  if (!host.ok()) return host.status();
  if (refuse) {
    absl::StatusOr<size_t> count = queue->TakeNonFinite(first);
    if (!count.ok()) return count.status();
    item.end.nonfinite = *count;
  }
  if (absl::Status s = queue->Zero(d.residual->span()); !s.ok()) return s;
  slot->residual.assign(n, 0.0f);
  item.host = *host;
  item.call->grad = item.host;
  item.call->residual = slot->residual;
  return absl::OkStatus();
}

absl::Status BucketPipeline::FinishStaged(Item& item, bool mask) {
  BucketSlot* slot = item.call->slot;
  DeviceResiduals& d = *slot->device;
  device::Queue& queue = *item.queue;
  // What the call kept (nothing after a dense exchange) goes back up onto
  // the zeroed device residual.
  const bool kept =
      std::any_of(slot->residual.begin(), slot->residual.end(), [](float v) { return v != 0.0f; });
  absl::Status s;
  if (kept) {
    // Through the queue's pinned ring: no pageable copy, no wait.
    absl::StatusOr<std::span<float>> up = queue.UpStaging(slot->residual.size());
    s = up.status();
    if (s.ok()) {
      std::copy(slot->residual.begin(), slot->residual.end(), up->begin());
      s = queue.UploadStaged(*up, d.residual->span());
    }
  }
  if (s.ok() && mask && d.velocity != nullptr) {
    s = queue.ZeroAt(AppliedIndices(item.host), d.velocity->span());
  }
  return s;
}

absl::Status BucketPipeline::FinishOnDevice(Item& item, const BucketOutcome& out,
                                            bool residual_ok) {
  device::Queue& queue = *item.queue;
  const float world = static_cast<float>(agent_->plan()->world());
  // The host path's arithmetic (bucket_result.h): the result's values
  // (divided by the world for the mean), written over a zeroed bucket; the
  // entries it applied (nonzero after the division) are the ones factor
  // masking restarts.
  std::vector<uint32_t> idx;
  std::vector<float> val;
  absl::Status s;
  if (out.result.is_dense) {
    // Written straight into the queue's pinned ring (kept between steps)
    // and copied up from there: no n-float host vector, no pageable copy.
    absl::StatusOr<std::span<float>> dense = queue.UpStaging(item.data.size());
    if (!dense.ok()) return dense.status();
    std::fill(dense->begin(), dense->end(), 0.0f);
    out.result.ToDense(*dense);
    ScaleForMean(*dense, options_.mean, world);
    idx = AppliedIndices(*dense);
    s = queue.UploadStaged(*dense, item.data);
  } else {
    idx = out.result.sparse.idx;
    val = out.result.sparse.val;
    ScaleForMean(val, options_.mean, world);
    s = queue.SparseToDense(idx, val, item.data);
    KeepApplied(&idx, val);
  }
  if (s.ok() && FactorMaskingOn(item, residual_ok) && SparseResult(idx.size(), item.data.size())) {
    s = queue.ZeroAt(idx, item.call->slot->device->velocity->span());
  }
  return s;
}

absl::Status BucketPipeline::EndOnDevice(Item& item) {
  device::Queue& queue = *item.queue;
  // A kernel's fault surfaces at the next wait: where work is queued since
  // the last one (the device path's last wait, the residual's norm, came
  // after its writes), the host waits once more.
  if (queue.pending()) (void)queue.Synchronize();
  auto named = [&item](const absl::Status& s, const char* what) {
    std::string keys;
    for (const ParamSpan& p : item.end.spans) {
      absl::StrAppend(&keys, keys.empty() ? "" : ",", p.key);
    }
    return absl::Status(
        s.code(), absl::StrCat("bucket ", item.end.index, " of step ", item.end.step, " (spans [",
                               keys, "]): ", what, " (", s.message(), ")"));
  };
  if (absl::Status fault = queue.TakeFault(); !fault.ok()) {
    item.device_fault = true;
    return named(fault,
                 "its device work faulted; the bucket's data is not its result and was not handed "
                 "back");
  }
  if (absl::Status back = HandBack(item); !back.ok()) {
    item.device_fault = true;
    return named(back, "handing its result back to the trainer's stream failed");
  }
  return absl::OkStatus();
}

void BucketPipeline::ReleaseDevice() {
  if (queues_[0] == nullptr && queues_[1] == nullptr) return;
  for (BucketSlot* slot : store_.Slots()) {
    // A slot that cannot come back keeps its device state (and the queues
    // and pools theirs): nothing is lost that SaveState could still read.
    if (!SlotToHost(slot, AnyQueue(), /*drop=*/true).ok()) return;
  }
  queues_[0].reset();
  queues_[1].reset();
  backend_->Trim();
}

absl::Status BucketPipeline::HandBack(Item& item) {
  absl::StatusOr<std::shared_ptr<device::Event>> e = item.queue->Record();
  if (!e.ok()) return e.status();
  // The slot's buffers are free for the other queue after this point.
  if (item.device_residual && item.call != nullptr && item.call->slot != nullptr &&
      item.call->slot->device != nullptr) {
    item.call->slot->device->last = *e;
  }
  return backend_->CallerWaits(item.stream, **e);
}

}  // namespace gradex::pipeline
