// The bucket pipeline's two ways for a Memory::kDevice bucket's data
// (BucketPipeline::Select chooses per bucket and step): the device path,
// where the slot's residual and velocity live on the bucket's GPU and only
// O(k) crosses PCIe, and the host path, where a device bucket is staged
// whole and a device-held slot's state comes back first.
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "services/agent/bucket_pipeline.h"

namespace gradex::agent {

absl::Status BucketPipeline::SlotToHost(BucketSlot* slot, DeviceMemory* memory) {
  if (slot->device == nullptr) return absl::OkStatus();
  DeviceResiduals& d = *slot->device;
  absl::Status s = memory->Bind(d.residual.span());
  if (s.ok()) s = memory->CopyToHost(d.residual.span(), slot->residual);
  if (s.ok() && d.velocity.size() > 0) s = memory->CopyToHost(d.velocity.span(), slot->velocity);
  if (!s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("copying a bucket's residual back from its GPU: ", s.message()));
  }
  slot->device.reset();
  return absl::OkStatus();
}

absl::Status BucketPipeline::ToHostPath(Item& item, BucketSlot* slot, DeviceMemory* memory) {
  if (absl::Status s = SlotToHost(slot, memory); !s.ok()) return s;
  item.device = nullptr;
  item.host = item.data;
  if (item.memory != Memory::kDevice) return absl::OkStatus();
  absl::StatusOr<std::span<float>> host = staging_[item.staging].ToHost(item.data);
  if (!host.ok()) return host.status();
  item.host = *host;
  item.end.device_path = DevicePath::kWholeBucketStaging;
  if (item.call != nullptr) item.call->grad = item.host;
  return absl::OkStatus();
}

absl::Status BucketPipeline::ToDevicePath(Item& item, BucketSlot* slot, DeviceMemory* memory) {
  if (absl::Status s = memory->Bind(item.data); !s.ok()) return s;
  const size_t n = item.data.size();
  if (slot->device == nullptr) {
    // The slot's first device step (or its first after a host one): its
    // state moves up once.
    // The velocity exists only with momentum: 4n bytes of device memory
    // less per bucket otherwise.
    const bool momentum = options_.momentum > 0;
    auto d = std::make_shared<DeviceResiduals>();
    absl::Status s = memory->Allocate(n, &d->residual);
    if (s.ok() && momentum) s = memory->Allocate(n, &d->velocity);
    if (s.ok()) s = memory->Upload(slot->residual, d->residual.span());
    if (s.ok() && momentum) s = memory->Upload(slot->velocity, d->velocity.span());
    if (!s.ok()) return s;
    slot->device = std::move(d);
  }
  if (slot->device->residual.size() != n) {
    return absl::InternalError(absl::StrCat("a device residual of ", slot->device->residual.size(),
                                            " elements for a bucket of ", n));
  }
  item.device = memory;
  item.host = {};
  item.end.device_path = DevicePath::kDeviceSelection;
  item.call->grad = item.data;
  item.call->residual = slot->device->residual.span();
  item.call->memory = memory;
  return absl::OkStatus();
}

absl::Status BucketPipeline::FinishOnDevice(Item& item, const BucketOutcome& out,
                                            bool residual_ok) {
  DeviceMemory& memory = *item.device;
  const float world = static_cast<float>(agent_->plan()->world());
  // The host path's arithmetic: the result's values (divided by the world
  // for the mean), written over a zeroed bucket; the entries it applied
  // (nonzero after the division) are the ones factor masking restarts.
  std::vector<uint32_t> idx;
  std::vector<float> val;
  absl::Status s;
  if (out.result.is_dense) {
    std::vector<float> dense(item.data.size(), 0.0f);
    out.result.ToDense(dense);
    if (options_.mean) {
      for (float& v : dense) v /= world;
    }
    for (size_t i = 0; i < dense.size(); ++i) {
      if (dense[i] != 0.0f) idx.push_back(static_cast<uint32_t>(i));
    }
    s = memory.Upload(dense, item.data);
  } else {
    idx = out.result.sparse.idx;
    val = out.result.sparse.val;
    if (options_.mean) {
      for (float& v : val) v /= world;
    }
    s = memory.SparseToDense(idx, val, item.data);
    size_t applied = 0;
    for (size_t i = 0; i < val.size(); ++i) {
      if (val[i] != 0.0f) idx[applied++] = idx[i];
    }
    idx.resize(applied);
  }
  if (s.ok() && item.status.ok() && residual_ok && options_.momentum > 0 &&
      options_.factor_masking && 2 * idx.size() < item.data.size()) {
    s = memory.ZeroAt(idx, item.call->slot->device->velocity.span());
  }
  if (s.ok()) s = memory.Synchronize();
  return s;
}

}  // namespace gradex::agent
