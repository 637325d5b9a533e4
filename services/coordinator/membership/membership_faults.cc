// Membership's answers to members that fail without leaving:
// the entry deadline (a member that heartbeats but never enters the data
// plane is evicted and named, item 5) and loss coalescing (failures close
// together make one epoch change, item 6).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "services/coordinator/hangs/wait_graph.h"
#include "services/coordinator/membership/membership.h"

namespace gradex::coordinator::membership {

void Membership::Evict(uint64_t id, MemberRecord::Cause cause, std::string why,
                       std::vector<uint64_t>* evicted) {
  auto it = members_.find(id);
  if (it == members_.end()) return;
  const bool in_epoch = has_epoch() && RankIn(latest(), id) >= 0;
  if (in_epoch) lost_ = true;
  // A member taken out with its node is alive: like one evicted at entry, a
  // re-join waits for the next barrier epoch rather than undo the node's exit.
  if (cause == MemberRecord::Cause::kNode) held_back_.insert(it->second.agent_id);
  if (cause == MemberRecord::Cause::kEntry || cause == MemberRecord::Cause::kBadFrames) {
    held_back_.insert(it->second.agent_id);
    Strikes& k = strikes_[it->second.agent_id];
    ++k.count;
    k.last = now_;
    // A stalled entry may be bad luck once; a bad frame never is: its sender
    // is quarantined from the first time (a lease, doubling).
    const int over = cause == MemberRecord::Cause::kBadFrames ? k.count - 1 : k.count - 2;
    if (over >= 0) {
      k.until = now_ + s_.lease * std::min<int64_t>(int64_t{1} << std::min(over, 20),
                                                    kMaxQuarantineLeases);
    }
    while (strikes_.size() > kMaxStrikes) {
      auto oldest = std::min_element(
          strikes_.begin(), strikes_.end(),
          [](const auto& a, const auto& b) { return a.second.last < b.second.last; });
      strikes_.erase(oldest);
    }
  }
  evicted->push_back(id);
  it->second.cause = cause;
  it->second.eviction = std::move(why);
  last_evicted_.push_back(std::move(it->second));
  by_agent_.erase(last_evicted_.back().agent_id);
  members_.erase(it);
  if (in_epoch && cause != MemberRecord::Cause::kNode) {
    const MemberRecord dead = last_evicted_.back();  // EvictNodeOf appends to last_evicted_
    EvictNodeOf(dead, evicted);
  }
}

// The evidence a member enters an epoch is what it tells about itself: its
// heartbeats name the epoch it enters or runs (an agent names the new epoch
// as soon as it starts connecting), and its reports are of that epoch. A
// member that never entered any epoch it was placed in (since it joined)
// within entry_timeout of the latest epoch's start holds the others at
// their entry: it goes, named, and the rest form the next epoch at once.
// A member that did enter an earlier one is judged by its peers instead
// (EvictBlamed): it may still be leaving an older entry that a newer epoch
// superseded (a superseded wire-up ends within 50 ms, a failed one at the
// entry timeout), which its own claims cannot tell from a stall.
void Membership::CheckEntry(absl::Time now, std::vector<uint64_t>* evicted) {
  if (!has_epoch()) return;
  Epoch& e = epochs_.back();
  if (e.entry_checked && e.blame_checked) return;
  if (e.entry_start == absl::InfiniteFuture()) {
    // A barrier epoch starts when the running one reaches its barrier.
    if (MaxNextStep() < e.effective_step) return;
    e.entry_start = now;
  }
  const bool due = now >= e.entry_start + s_.entry_timeout;
  if (!e.entry_checked) {
    std::vector<uint64_t> absent;
    for (uint64_t id : e.roster) {
      auto it = members_.find(id);
      if (it != members_.end() && it->second.entered_epoch < it->second.first_epoch) {
        absent.push_back(id);
      }
    }
    if (absent.empty() || due) {
      e.entry_checked = true;
      for (uint64_t id : absent) {
        Evict(id, MemberRecord::Cause::kEntry,
              absl::StrCat("did not enter epoch ", e.number, " within ",
                           absl::ToInt64Milliseconds(s_.entry_timeout),
                           " ms (it never entered an epoch since it joined; its peers wait for it "
                           "at entry)"),
              evicted);
      }
    }
  }
  if (!e.blame_checked && due) {
    e.blame_checked = true;
    EvictBlamed(e, now, evicted);
  }
}

// At the entry deadline, the others' heartbeats say what their entry waits
// on (the wait tracker's oldest pending receive, bounded to the epoch's ranks
// on receipt). The entry agreement is a dissemination exchange, so a stalled
// rank is waited on directly by a few ranks and through them by the rest:
// each wait chain is followed to the rank it ends at (wait_graph.h). A
// member whose chains come from a strict majority of the other members is
// evicted, so one liar (or a minority) cannot evict an honest member; with
// two members the one other member decides (the job cannot go on either
// way, and the evicted member may join again). Only waits of this epoch at
// least half the entry timeout old count: a straggler's step waits are
// shorter, and a fresh wait proves no stall. (A staller that also claims a
// wait makes a cycle, which is not judged: docs/security.md.)
void Membership::EvictBlamed(const Epoch& e, absl::Time now, std::vector<uint64_t>* evicted) {
  const int p = static_cast<int>(e.roster.size());
  if (p < 2) return;
  std::vector<int> waits_on(p, -1);
  for (int r = 0; r < p; ++r) {
    const MemberRecord* rec = Find(e.roster[r]);
    if (rec == nullptr || !rec->waiting) continue;
    const gradex::v1::WaitState& ws = rec->wait;
    if (ws.epoch() != e.number || ws.step() < rec->next_step) continue;
    if (ws.peer_rank() < 0 || ws.peer_rank() >= p || ws.peer_rank() == r) continue;
    const absl::Duration age = absl::Milliseconds(ws.waited_ms()) + (now - rec->last_heartbeat);
    if (age >= s_.entry_timeout / 2) waits_on[r] = ws.peer_rank();
  }
  for (const hangs::WaitCause& c : hangs::DiagnoseWaits(waits_on).causes) {
    if (c.ranks.size() != 1) continue;
    const int blamers = static_cast<int>(c.waiters.size());
    if (2 * blamers <= p - 1) continue;
    // A member that finished a step of this epoch has entered it: a stall
    // after entry (a slow data loader, a paused trainer) is the stall
    // detector's to report, and the step deadline's to end, not a reason to
    // evict it for its entry.
    const MemberRecord* blamed = Find(e.roster[c.ranks[0]]);
    if (blamed != nullptr && blamed->next_step > e.effective_step) continue;
    Evict(e.roster[c.ranks[0]], MemberRecord::Cause::kEntry,
          absl::StrCat("blamed by ", blamers, " of ", p - 1, " members for not entering epoch ",
                       e.number, " within ", absl::ToInt64Milliseconds(s_.entry_timeout),
                       " ms (their entry waits end at it)"),
          evicted);
  }
}

// Members killed together lose their leases up to a heartbeat interval
// apart (lease / 3): forming at the first eviction would make one epoch per
// loss, each costing the survivors a failed entry. The window holds the
// epoch for loss_settle after the first loss (leases lapsing meanwhile fold
// in); at its end a member of the latest epoch silent for two heartbeat
// intervals (whose lease would lapse within a third of it) is dropped too.
bool Membership::LossSettled(absl::Time now, std::vector<uint64_t>* evicted) {
  if (s_.loss_settle <= absl::ZeroDuration()) return true;
  if (lost_at_ == absl::InfiniteFuture()) lost_at_ = now;
  if (now < lost_at_ + s_.loss_settle) return false;
  const absl::Duration silence = s_.lease * 2 / 3;
  std::vector<uint64_t> silent;
  for (uint64_t id : latest().roster) {
    auto it = members_.find(id);
    if (it != members_.end() && now - it->second.last_heartbeat >= silence) silent.push_back(id);
  }
  for (uint64_t id : silent) {
    Evict(id, MemberRecord::Cause::kSilent,
          absl::StrCat("silent for ", absl::ToInt64Milliseconds(silence),
                       " ms while the epoch changes for another loss"),
          evicted);
  }
  return true;
}

bool Membership::BlameBadFrames(uint64_t reporter, const Epoch& e, int blamed, std::string why) {
  if (blamed < 0 || blamed >= static_cast<int>(e.roster.size())) return false;
  const uint64_t id = e.roster[blamed];
  if (id == reporter || members_.count(id) == 0) return false;
  blamed_.emplace(id, std::move(why));
  return true;
}

void Membership::EvictBadFrameSenders(std::vector<uint64_t>* evicted) {
  std::map<uint64_t, std::string> blamed;
  blamed.swap(blamed_);
  for (auto& [id, why] : blamed)
    Evict(id, MemberRecord::Cause::kBadFrames, std::move(why), evicted);
}

}  // namespace gradex::coordinator::membership
