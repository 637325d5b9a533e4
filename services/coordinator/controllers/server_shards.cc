#include "services/coordinator/controllers/server_shards.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"

namespace gradex::coordinator::controllers {

std::vector<ShardRange> ShardRanges(uint64_t total, uint32_t shards) {
  std::vector<ShardRange> out;
  if (shards == 0) return out;
  const uint64_t base = total / shards, extra = total % shards;
  uint64_t at = 0;
  for (uint32_t s = 0; s < shards; ++s) {
    const uint64_t size = base + (s < extra ? 1 : 0);
    out.push_back({at, at + size});
    at += size;
  }
  return out;
}

std::vector<ShardRange> ShardRanges(const std::vector<uint32_t>& layer_sizes, uint32_t shards) {
  uint64_t total = 0;
  for (uint32_t n : layer_sizes) total += n;
  return ShardRanges(total, shards);
}

absl::Status ServerShards::AssignSlots(const std::vector<ShardCandidate>& roster,
                                       std::vector<int>* slots) {
  size_t workers = 0;
  for (const ShardCandidate& c : roster) workers += c.server ? 0 : 1;
  if (workers > static_cast<size_t>(slots_)) {
    return absl::FailedPreconditionError(
        absl::StrCat(workers, " workers on the roster but the servers keep ", slots_, " slots"));
  }
  slot_holder_.resize(slots_, 0);
  std::map<uint64_t, int> kept;
  for (int s = 0; s < slots_; ++s) {
    if (slot_holder_[s] != 0) kept[slot_holder_[s]] = s;
  }
  std::vector<uint64_t> next(slots_, 0);
  // Members still on the roster keep their slots; the others' are freed.
  for (size_t r = 0; r < roster.size(); ++r) {
    if (roster[r].server) continue;
    auto it = kept.find(roster[r].member_id);
    if (it != kept.end()) {
      (*slots)[r] = it->second;
      next[it->second] = roster[r].member_id;
    }
  }
  int free_slot = 0;
  for (size_t r = 0; r < roster.size(); ++r) {
    if (roster[r].server || (*slots)[r] >= 0) continue;
    while (next[free_slot] != 0) ++free_slot;  // workers <= slots: one is free
    (*slots)[r] = free_slot;
    next[free_slot] = roster[r].member_id;
  }
  slot_holder_ = std::move(next);
  return absl::OkStatus();
}

absl::StatusOr<ShardAssignment> ServerShards::Assign(const std::vector<ShardCandidate>& roster,
                                                     absl::Time now) {
  std::vector<int> servers;
  std::set<std::string> hosts;
  for (size_t r = 0; r < roster.size(); ++r) {
    hosts.insert(roster[r].host);
    if (roster[r].server) servers.push_back(static_cast<int>(r));
  }
  if (servers.empty()) {
    if (unserved_since_ == absl::InfiniteFuture()) unserved_since_ = now;
    return absl::FailedPreconditionError(
        absl::StrCat("no SERVER member among the epoch's ", roster.size(),
                     " members: the job's server shards are unserved"));
  }
  unserved_since_ = absl::InfiniteFuture();
  std::vector<int> slots(roster.size(), -1);
  if (absl::Status st = AssignSlots(roster, &slots); !st.ok()) return st;
  if (shards_ == 0) {
    const size_t per_host = std::max<size_t>(hosts.size(), 1);
    shards_ = configured_ > 0 ? configured_
                              : static_cast<uint32_t>(std::min<size_t>(per_host, kMaxServerShards));
    holders_.assign(shards_, 0);
  }
  ShardAssignment a;
  a.shards = shards_;
  a.slot_of_rank = std::move(slots);
  a.rank_of_shard.resize(shards_);
  for (uint32_t s = 0; s < shards_; ++s) {
    const int rank = servers[s % servers.size()];
    a.rank_of_shard[s] = rank;
    const uint64_t member = roster[rank].member_id;
    if (holders_[s] != 0 && holders_[s] != member) ++moves_;
    holders_[s] = member;
  }
  return a;
}

}  // namespace gradex::coordinator::controllers
