#include "services/coordinator/membership.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "services/coordinator/limits.h"

namespace gradex::coordinator {
namespace {
constexpr size_t kEpochsKept = 4;
}  // namespace

absl::Status Membership::Join(const gradex::v1::JoinRequest& r, uint64_t id, absl::Time now,
                              uint64_t* replaced) {
  *replaced = 0;
  if (r.job_id() != s_.job_id) {
    return absl::FailedPreconditionError(
        absl::StrCat("this coordinator serves job '", s_.job_id, "'"));
  }
  auto old = by_agent_.find(r.agent_id());
  if (old == by_agent_.end() && members_.size() >= static_cast<size_t>(kMaxWorldSize)) {
    return absl::ResourceExhaustedError("the job has the maximum number of members");
  }
  if (old != by_agent_.end()) {
    // Re-registration replaces the old membership (its id stops working).
    if (has_epoch() && RankIn(latest(), old->second) >= 0) lost_ = true;
    *replaced = old->second;
    members_.erase(old->second);
  }
  MemberRecord m;
  m.id = id;
  m.agent_id = r.agent_id();
  m.host = r.host();
  m.device = r.device();
  m.ucx_address = r.ucx_address();
  m.local_rank = r.local_rank();
  m.lease_expiry = now + s_.lease;
  m.last_heartbeat = now;
  m.next_step = r.next_step();
  if (r.last_epoch() > 0) {
    m.last_epoch = r.last_epoch();
    m.last_rank = r.last_rank();
    // Keep the epoch monotonic across a coordinator restart.
    epoch_counter_ = std::max(epoch_counter_, r.last_epoch());
    if (!has_epoch()) rebuild_world_ = std::max(rebuild_world_, r.last_world_size());
  }
  members_[id] = std::move(m);
  by_agent_[r.agent_id()] = id;
  if (!has_epoch() && !rendezvous_open_) {
    rendezvous_open_ = true;
    rendezvous_deadline_ = now + s_.rendezvous_timeout;
  }
  return absl::OkStatus();
}

absl::Status Membership::Heartbeat(uint64_t id, uint64_t next_step, absl::Time now) {
  auto it = members_.find(id);
  if (it == members_.end()) return absl::NotFoundError("unknown member: join again");
  it->second.lease_expiry = now + s_.lease;
  it->second.next_step = std::max(it->second.next_step, next_step);
  it->second.last_heartbeat = now;
  return absl::OkStatus();
}

absl::Status Membership::Heartbeat(const gradex::v1::HeartbeatRequest& r, absl::Time now) {
  absl::Status st = Heartbeat(r.member_id(), r.next_step(), now);
  if (!st.ok()) return st;
  MemberRecord& m = members_.at(r.member_id());
  m.epoch = r.epoch();
  m.waiting = r.has_waiting();
  if (m.waiting) m.wait = r.waiting();
  return absl::OkStatus();
}

absl::Status Membership::Leave(uint64_t id) {
  auto it = members_.find(id);
  if (it == members_.end()) return absl::NotFoundError("unknown member");
  if (has_epoch() && RankIn(latest(), id) >= 0) lost_ = true;
  by_agent_.erase(it->second.agent_id);
  members_.erase(it);
  return absl::OkStatus();
}

void Membership::NoteStep(uint64_t id, uint64_t step) {
  auto it = members_.find(id);
  if (it != members_.end()) it->second.next_step = std::max(it->second.next_step, step + 1);
}

const Epoch* Membership::FindEpoch(uint64_t number) const {
  for (const Epoch& e : epochs_) {
    if (e.number == number) return &e;
  }
  return nullptr;
}

int Membership::RankIn(const Epoch& e, uint64_t id) const {
  auto it = std::find(e.roster.begin(), e.roster.end(), id);
  return it == e.roster.end() ? -1 : static_cast<int>(it - e.roster.begin());
}

const MemberRecord* Membership::Find(uint64_t id) const {
  auto it = members_.find(id);
  return it == members_.end() ? nullptr : &it->second;
}

size_t Membership::pending() const {
  if (!has_epoch()) return members_.size();
  size_t in = 0;
  for (uint64_t id : latest().roster) in += members_.count(id);
  return members_.size() - in;
}

uint64_t Membership::MaxNextStep() const {
  uint64_t m = 0;
  for (const auto& [id, r] : members_) m = std::max(m, r.next_step);
  return m;
}

uint64_t Membership::NextBarrier(uint64_t step) const {
  const uint64_t tau = static_cast<uint64_t>(std::max(s_.barrier_period, 1));
  return (step + tau - 1) / tau * tau;
}

// Re-registered agents in their old rank order first (ranks stay put when
// the same members return), then new ones by host, local rank, agent id.
std::vector<uint64_t> Membership::FreshOrder(std::vector<uint64_t> ids) const {
  std::sort(ids.begin(), ids.end(), [&](uint64_t a, uint64_t b) {
    const MemberRecord& x = members_.at(a);
    const MemberRecord& y = members_.at(b);
    auto key = [](const MemberRecord& m) {
      return std::make_tuple(m.last_rank < 0, m.last_rank, m.host, m.local_rank, m.agent_id);
    };
    return key(x) < key(y);
  });
  return ids;
}

void Membership::FormEpoch(std::vector<uint64_t> roster, uint64_t effective, bool immediate) {
  Epoch e;
  e.number = ++epoch_counter_;
  e.effective_step = effective;
  e.immediate = immediate;
  e.roster = std::move(roster);
  epochs_.push_back(std::move(e));
  while (epochs_.size() > kEpochsKept) epochs_.pop_front();
  lost_ = false;
  rendezvous_open_ = false;
  rebuild_world_ = 0;
}

bool Membership::Tick(absl::Time now, std::vector<uint64_t>* evicted) {
  for (auto it = members_.begin(); it != members_.end();) {
    if (it->second.lease_expiry <= now) {
      if (has_epoch() && RankIn(latest(), it->first) >= 0) lost_ = true;
      evicted->push_back(it->first);
      by_agent_.erase(it->second.agent_id);
      it = members_.erase(it);
    } else {
      ++it;
    }
  }
  std::vector<uint64_t> all;
  for (const auto& [id, m] : members_) all.push_back(id);

  if (!has_epoch() || (lost_ && all.empty())) {
    if (all.empty()) {
      // Everyone is gone: the next joiner opens a new rendezvous; the epoch
      // counter keeps counting.
      if (has_epoch()) epochs_.clear();
      rendezvous_open_ = false;
      lost_ = false;
      return false;
    }
    const bool rebuild = rebuild_world_ > 0;
    const int expected = rebuild ? rebuild_world_ : s_.world_size;
    const int n = static_cast<int>(all.size());
    const bool complete = n >= expected;
    if (!complete && !(now >= rendezvous_deadline_ && n >= s_.min_world_size)) return false;
    // A rebuilt job whose members all came back is still running its old
    // epoch: switch at a barrier. Otherwise start (or restart) at once.
    const uint64_t next = MaxNextStep();
    if (rebuild && complete) {
      FormEpoch(FreshOrder(all), NextBarrier(next + s_.plan_lead_steps), false);
    } else {
      FormEpoch(FreshOrder(all), next, true);
    }
    return true;
  }

  const Epoch& cur = latest();
  std::vector<uint64_t> roster;
  std::set<uint64_t> in;
  for (uint64_t id : cur.roster) {
    if (members_.count(id)) {
      roster.push_back(id);
      in.insert(id);
    }
  }
  std::vector<uint64_t> newcomers;
  for (uint64_t id : all) {
    if (!in.count(id)) newcomers.push_back(id);
  }
  if (!lost_ && newcomers.empty()) return false;
  newcomers = FreshOrder(std::move(newcomers));
  roster.insert(roster.end(), newcomers.begin(), newcomers.end());
  if (lost_) {
    // The old epoch cannot finish a step without the lost member: the new one
    // applies at once, from the furthest step any survivor reached.
    FormEpoch(std::move(roster), MaxNextStep(), true);
  } else {
    // Late joiners: admitted at the next plan barrier the running members can
    // still see coming. A later joiner before that barrier gets a newer epoch
    // for the same (or a later) barrier.
    uint64_t at = NextBarrier(MaxNextStep() + s_.plan_lead_steps);
    at = std::max(at, cur.effective_step);  // never earlier than the epoch it replaces
    FormEpoch(std::move(roster), at, false);
  }
  return true;
}

}  // namespace gradex::coordinator
