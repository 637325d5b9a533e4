#include "services/coordinator/membership/membership.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "services/coordinator/limits.h"
#include "services/coordinator/log.h"
#include "services/coordinator/membership/member_secret.h"

namespace gradex::coordinator::membership {
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
  if (absl::Status st = CheckJoinBounds(r, now); !st.ok()) return st;
  if (absl::Status st = CheckDataPlane(r); !st.ok()) return st;
  if (r.role() == gradex::v1::ROLE_SERVER && !s_.ps.enabled) {
    return absl::FailedPreconditionError(absl::StrCat("role SERVER: job '", s_.job_id,
                                                      "' is not a parameter-server job (algorithm ",
                                                      s_.algorithm, ")"));
  }
  if (auto q = strikes_.find(r.agent_id()); q != strikes_.end() && now < q->second.until) {
    return absl::UnavailableError(absl::StrCat(
        "agent_id '", Quote(r.agent_id()), "' is quarantined for ",
        absl::ToInt64Milliseconds(q->second.until - now), " ms: evicted ", q->second.count,
        " times for not entering an epoch within entry_timeout (join again after that)"));
  }
  auto old = by_agent_.find(r.agent_id());
  if (old != by_agent_.end()) {
    // An agent id belongs to its member while its lease is live: ids are
    // public (every plan lists them), so taking one over needs the secret
    // only that member holds. After the lease lapses the id is free again
    // (a restarted process of the same agent waits for that).
    const MemberRecord& held = members_.at(old->second);
    if (held.lease_expiry > now && !SecretMatches(held.secret, r.member_secret())) {
      return absl::AlreadyExistsError(absl::StrCat(
          "agent_id '", Quote(r.agent_id()), "' is held by live member ", held.id,
          " (its lease lapses in ", absl::ToInt64Milliseconds(held.lease_expiry - now),
          " ms): re-register with that member's member_secret, or wait for the lease"));
    }
  }
  // Memory and epochs stay bounded by the job, not by who holds the token:
  // the largest epoch plus a spare for replacements that join before the
  // member they replace is evicted.
  if (old == by_agent_.end() && members_.size() >= static_cast<size_t>(MemberCap(s_))) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the job holds its ", members_.size(), " members (at most ", MaxWorld(s_),
                     " in an epoch plus ", MemberCap(s_) - MaxWorld(s_), " spare): join refused"));
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
  m.ucx_version = r.ucx_version();
  m.ucx_transports = r.ucx_transports();
  m.local_rank = r.local_rank();
  m.server = r.role() == gradex::v1::ROLE_SERVER;
  m.lease_expiry = now + s_.lease;
  m.last_heartbeat = now;
  m.next_step = r.next_step();
  m.progress_at = now;
  if (r.last_epoch() > 0) {
    m.last_epoch = r.last_epoch();
    m.last_rank = r.last_rank();
    // Keep the epoch monotonic across a coordinator restart.
    // (Bounded by CheckJoinBounds: at most kMaxRejoinEpoch, and a member's
    // claimed world at most the job's largest.)
    epoch_counter_ = std::max(epoch_counter_, static_cast<EpochNumber>(r.last_epoch()));
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
  it->second.progress_at = now;
  it->second.last_heartbeat = now;
  return absl::OkStatus();
}

absl::Status Membership::Heartbeat(const gradex::v1::HeartbeatRequest& r, absl::Time now) {
  if (Find(r.member_id()) == nullptr) return absl::NotFoundError("unknown member: join again");
  absl::Status st = CheckStep(r.member_id(), "next_step", r.next_step(), now);
  if (st.ok()) st = CheckEpoch("epoch", r.epoch());
  if (st.ok() && r.has_waiting()) st = CheckEpoch("waiting.epoch", r.waiting().epoch());
  if (st.ok() && r.has_waiting()) {
    st = CheckStep(r.member_id(), "waiting.step", r.waiting().step(), now);
  }
  if (st.ok()) st = Heartbeat(r.member_id(), r.next_step(), now);
  if (!st.ok()) return st;
  MemberRecord& m = members_.at(r.member_id());
  m.epoch = r.epoch();
  m.entered_epoch = std::max(m.entered_epoch, r.epoch());
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

void Membership::NoteStep(uint64_t id, uint64_t step, absl::Time now) {
  auto it = members_.find(id);
  if (it == members_.end()) return;
  it->second.next_step = std::max(it->second.next_step, step + 1);
  it->second.progress_at = now;
}

void Membership::StepSucceeded(uint64_t id) {
  if (strikes_.empty()) return;
  auto it = members_.find(id);
  if (it != members_.end()) strikes_.erase(it->second.agent_id);
}

void Membership::NoteEpoch(uint64_t id, uint64_t epoch) {
  auto it = members_.find(id);
  if (it != members_.end()) it->second.entered_epoch = std::max(it->second.entered_epoch, epoch);
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

void Membership::SetSecret(uint64_t id, std::string secret) {
  auto it = members_.find(id);
  if (it != members_.end()) it->second.secret = std::move(secret);
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

bool Membership::FormEpoch(std::vector<uint64_t> roster, uint64_t effective, bool immediate) {
  if (epoch_counter_ >= kMaxEpoch) return false;  // never wraps (agents drop a wrapped epoch)
  if (roster.size() > static_cast<size_t>(MaxWorld(s_))) roster.resize(MaxWorld(s_));
  formed_any_ = true;
  for (uint64_t id : roster) {
    auto it = members_.find(id);
    if (it != members_.end() && it->second.first_epoch == 0) {
      it->second.first_epoch = epoch_counter_ + 1;
    }
  }
  Epoch e;
  e.number = ++epoch_counter_;
  e.effective_step = effective;
  e.immediate = immediate;
  e.roster = std::move(roster);
  e.nodes = CountNodes(e.roster);
  epochs_.push_back(std::move(e));
  while (epochs_.size() > kEpochsKept) epochs_.pop_front();
  lost_ = false;
  lost_at_ = absl::InfiniteFuture();
  rendezvous_open_ = false;
  rebuild_world_ = 0;
  held_back_.clear();
  return true;
}

bool Membership::Tick(absl::Time now, std::vector<uint64_t>* evicted) {
  now_ = now;
  last_evicted_.clear();
  std::vector<uint64_t> expired;
  for (const auto& [id, m] : members_) {
    if (m.lease_expiry <= now) expired.push_back(id);
  }
  for (uint64_t id : expired) Evict(id, MemberRecord::Cause::kLease, "lease expired", evicted);
  EvictBadFrameSenders(evicted);
  CheckEntry(now, evicted);
  if (has_epoch() && lost_ && !members_.empty() && !LossSettled(now, evicted)) return false;
  std::vector<uint64_t> all;
  for (const auto& [id, m] : members_) all.push_back(id);

  if (!has_epoch() || (lost_ && all.empty())) {
    if (all.empty()) {
      // Everyone is gone: the next joiner opens a new rendezvous; the epoch
      // counter keeps counting.
      if (has_epoch()) epochs_.clear();
      rendezvous_open_ = false;
      lost_ = false;
      lost_at_ = absl::InfiniteFuture();
      return false;
    }
    // A rebuild waits for the world its members say they ran, but a claim
    // below the job's minimum only counts after the rendezvous timeout: one
    // member saying "we were 1" must not open a 1-member epoch at once.
    const bool rebuild = rebuild_world_ > 0;
    const int expected = rebuild ? std::max(rebuild_world_, s_.min_world_size) : s_.world_size;
    const int minimum = rebuild ? std::min(rebuild_world_, s_.min_world_size) : s_.min_world_size;
    const int n = static_cast<int>(all.size());
    const bool complete = n >= expected;
    if (!complete && !(now >= rendezvous_deadline_ && n >= minimum)) return false;
    // A rebuilt job whose members all came back is still running its old
    // epoch: switch at a barrier. Otherwise start (or restart) at once.
    const uint64_t next = MaxNextStep();
    if (rebuild && complete) {
      return FormEpoch(FreshOrder(all), NextBarrier(next + s_.plan_lead_steps), false);
    }
    return FormEpoch(FreshOrder(all), next, true);
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
  if (lost_ && !roster.empty()) {
    // An agent evicted at the entry deadline may join again at once (its
    // heartbeats go on while the rest of it stalls): the survivors' epoch
    // leaves it out, since agents abandon a superseded entry only for an
    // epoch that drops one of its members (epoch_preemption.h); it comes
    // in at the next barrier, as any late joiner.
    std::erase_if(newcomers,
                  [&](uint64_t id) { return held_back_.count(members_.at(id).agent_id) > 0; });
  }
  // An epoch never grows past the job's largest (max_world_size): the rest
  // wait, pending, for a place.
  const size_t room =
      static_cast<size_t>(MaxWorld(s_)) - std::min<size_t>(roster.size(), MaxWorld(s_));
  newcomers = FreshOrder(std::move(newcomers));
  if (newcomers.size() > room) newcomers.resize(room);
  if (!lost_ && newcomers.empty()) return false;
  roster.insert(roster.end(), newcomers.begin(), newcomers.end());
  if (lost_) {
    // The old epoch cannot finish a step without the lost member: the new one
    // applies at once, from the furthest step any survivor reached.
    return FormEpoch(std::move(roster), MaxNextStep(), true);
  } else {
    // Late joiners: admitted at the next plan barrier the running members can
    // still see coming. A later joiner before that barrier gets a newer epoch
    // for the same (or a later) barrier.
    uint64_t at = NextBarrier(MaxNextStep() + s_.plan_lead_steps);
    at = std::max(at, cur.effective_step);  // never earlier than the epoch it replaces
    return FormEpoch(std::move(roster), at, false);
  }
}

}  // namespace gradex::coordinator::membership
