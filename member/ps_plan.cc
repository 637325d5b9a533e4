#include "member/ps_plan.h"

#include "absl/strings/str_cat.h"

namespace gradex::member {
namespace {

absl::Status Bad(const char* field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("ps.", field, ": ", why));
}

}  // namespace

absl::StatusOr<PsPlan> ToPsPlan(const gradex::v1::PsPlan& m,
                                const std::vector<PlanMember>& members) {
  PsPlan p;
  const int world = static_cast<int>(members.size());
  if (m.shards() < 1 || m.shards() > kMaxPsShards)
    return Bad("shards", absl::StrCat("1..", kMaxPsShards));
  if (m.assignments_size() != static_cast<int>(m.shards())) {
    return Bad("assignments", absl::StrCat(m.assignments_size(), " for ", m.shards(), " shards"));
  }
  p.shards = m.shards();
  for (int s = 0; s < m.assignments_size(); ++s) {
    const gradex::v1::PsShard& a = m.assignments(s);
    if (a.shard() != static_cast<uint32_t>(s)) {
      return Bad("assignments", absl::StrCat("entry ", s, " names shard ", a.shard()));
    }
    if (a.rank() < 0 || a.rank() >= world || !members[a.rank()].server) {
      return Bad("assignments",
                 absl::StrCat("shard ", s, " on rank ", a.rank(), ", not a SERVER of the plan"));
    }
    p.shard_rank.push_back(a.rank());
  }
  if (m.layer_sizes_size() < 1 || static_cast<size_t>(m.layer_sizes_size()) > kMaxPsLayers) {
    return Bad("layer_sizes", "1..65536 layers");
  }
  uint64_t total = 0;
  for (uint32_t size : m.layer_sizes()) {
    if (size == 0) return Bad("layer_sizes", "an empty layer");
    total += size;
  }
  if (total >= (uint64_t{1} << 32)) return Bad("layer_sizes", "total over 2^32 - 1");
  if (total < p.shards) return Bad("shards", "more shards than elements");
  p.layer_sizes.assign(m.layer_sizes().begin(), m.layer_sizes().end());
  if (m.worker_slots() < 1 || m.worker_slots() > kMaxPsWorkerSlots) {
    return Bad("worker_slots", "1..65536");
  }
  p.worker_slots = m.worker_slots();
  if (m.worker_slot_size() != world) {
    return Bad("worker_slot", absl::StrCat(m.worker_slot_size(), " entries for ", world, " ranks"));
  }
  std::vector<uint8_t> used(p.worker_slots, 0);
  for (int r = 0; r < world; ++r) {
    const int slot = m.worker_slot(r);
    if (members[r].server) {
      if (slot != -1) return Bad("worker_slot", absl::StrCat("server rank ", r, " has a slot"));
    } else if (slot < 0 || slot >= static_cast<int>(p.worker_slots) || used[slot]) {
      return Bad("worker_slot",
                 absl::StrCat("rank ", r, ": slot ", slot, " out of range or taken"));
    } else {
      used[slot] = 1;
    }
    p.worker_slot.push_back(slot);
  }
  if (m.max_staleness() > (uint64_t{1} << 32)) return Bad("max_staleness", "at most 2^32");
  p.max_staleness = m.max_staleness();
  p.snapshot_interval = std::chrono::milliseconds(m.snapshot_interval_ms());
  return p;
}

}  // namespace gradex::member
