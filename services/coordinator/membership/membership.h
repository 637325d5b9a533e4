// Membership and epochs: leases, eviction, torchrun-like rendezvous, dense
// ranks, a new epoch on every change, and the rebuild after a coordinator
// restart from the agents' re-registration. Pure logic with the clock passed
// in; the Coordinator serialises calls.
#ifndef GRADEX_SERVICES_COORDINATOR_MEMBERSHIP_MEMBERSHIP_H_
#define GRADEX_SERVICES_COORDINATOR_MEMBERSHIP_MEMBERSHIP_H_

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gradex/v1/coordinator.pb.h"
#include "services/coordinator/job_config.h"
#include "services/coordinator/limits.h"

namespace gradex::coordinator::membership {

struct MemberRecord {
  uint64_t id = 0;
  std::string agent_id, host, device, ucx_address, ucx_version, ucx_transports;
  int local_rank = 0;
  bool server = false;  // joined as a SERVER (parameter-server jobs only)
  std::string secret;   // member_secret.h: proves a call comes from this member
  absl::Time lease_expiry;
  uint64_t next_step = 0;  // the step it runs next (join, heartbeat, reports)
  absl::Time progress_at;  // when it last told its step (bounds the next claim)
  // Hang diagnosis: when it last heartbeated (or joined), the epoch its
  // heartbeats say it runs (0: not said), and the wait its last heartbeat
  // carried (`waiting` false when that heartbeat carried none).
  absl::Time last_heartbeat;
  uint64_t epoch = 0;
  bool waiting = false;
  gradex::v1::WaitState wait;
  // Re-registration after a coordinator restart.
  uint64_t last_epoch = 0;
  int last_rank = -1;
  // The newest epoch it showed it enters or runs (its heartbeats' epoch, its
  // reports'): the entry deadline's evidence.
  uint64_t entered_epoch = 0;
  uint64_t first_epoch = 0;  // the first epoch with it on the roster (0: none yet)
  // Why it was evicted (last_evicted() only).
  // kNode: taken out with its node, when another member on it was evicted
  // (membership_nodes.cc).
  enum class Cause { kNone, kLease, kEntry, kSilent, kBadFrames, kNode } cause = Cause::kNone;
  std::string eviction;
};

struct Epoch {
  EpochNumber number = 0;
  uint64_t effective_step = 0;
  bool immediate = false;        // formed because a member was lost (or first)
  std::vector<uint64_t> roster;  // member ids in rank order
  int nodes = 0;                 // distinct hosts on the roster when it formed
  // Entry: starts when the job reaches effective_step (at once for an
  // immediate epoch); checked once every member entered or at the deadline.
  absl::Time entry_start = absl::InfiniteFuture();
  bool entry_checked = false;
  bool blame_checked = false;  // the peers' waits judged at the deadline
};

class Membership {
 public:
  explicit Membership(const JobSettings& settings) : s_(settings) {}

  // Adds (or, for a known agent_id, replaces) a member with id `id` (chosen
  // by the caller, unique); *replaced gets the old id of a re-registering
  // agent (else 0). FAILED_PRECONDITION on another job's id,
  // RESOURCE_EXHAUSTED past the member cap, ALREADY_EXISTS naming the id when
  // a live member holds agent_id and `r` lacks that member's secret,
  // UNAVAILABLE while the agent id is quarantined (strikes_).
  absl::Status Join(const gradex::v1::JoinRequest& r, uint64_t id, absl::Time now,
                    uint64_t* replaced);
  // NOT_FOUND when the member is unknown (evicted or never joined).
  absl::Status Heartbeat(uint64_t id, uint64_t next_step, absl::Time now);
  // The same, keeping the request's epoch and wait state (validated).
  absl::Status Heartbeat(const gradex::v1::HeartbeatRequest& r, absl::Time now);
  absl::Status Leave(uint64_t id);
  // A step report: progress only (the step it finished or failed).
  void NoteStep(uint64_t id, uint64_t step, absl::Time now);
  // A step of an epoch it is in finished without error: the member works,
  // its entry strikes (quarantine) are forgotten.
  void StepSucceeded(uint64_t id);
  // A report from `epoch` (validated): the member is in it.
  void NoteEpoch(uint64_t id, uint64_t epoch);
  // Member `reporter` of epoch `e` refused a frame that rank `blamed` of `e`
  // sent (the receiver validates every frame and knows its sender): the
  // blamed member is evicted at the next Tick and its agent id quarantined
  // (strikes_). False (nothing done) when `blamed` is not another member of
  // `e` still here.
  bool BlameBadFrames(uint64_t reporter, const Epoch& e, int blamed, std::string why);

  // Evicts expired leases and members that did not enter the latest epoch
  // by its entry deadline (their ids appended to *evicted) and forms a new
  // epoch when due: the rendezvous completed, members were lost (after the
  // loss settle window), or members wait to be admitted (at the next plan
  // barrier). Returns true when a new epoch was formed.
  bool Tick(absl::Time now, std::vector<uint64_t>* evicted);
  // The members the last Tick evicted, as they were (for the log's names),
  // each with its `eviction` reason.
  const std::vector<MemberRecord>& last_evicted() const { return last_evicted_; }

  bool has_epoch() const { return !epochs_.empty(); }
  const Epoch& latest() const { return epochs_.back(); }
  // The epoch with this number, if still remembered (the last few), or null.
  const Epoch* FindEpoch(uint64_t number) const;
  // Rank of the member in the epoch, or -1.
  int RankIn(const Epoch& e, uint64_t id) const;
  const MemberRecord* Find(uint64_t id) const;
  void SetSecret(uint64_t id, std::string secret);
  size_t size() const { return members_.size(); }
  size_t pending() const;  // members not in the latest epoch
  // The largest step any member will run next.
  uint64_t MaxNextStep() const;
  uint64_t NextBarrier(uint64_t step) const;

  // Bounds on the numbers a member sends, from what the coordinator knows
  // (docs/design.md, Trust; progress_bounds.cc): INVALID_ARGUMENT naming the
  // field. `id` is the member that claims (0: none yet).
  absl::Status CheckJoinBounds(const gradex::v1::JoinRequest& r, absl::Time now) const;
  absl::Status CheckStep(uint64_t id, const char* field, uint64_t step, absl::Time now) const;
  absl::Status CheckEpoch(const char* field, uint64_t epoch) const;
  // FAILED_PRECONDITION when the joiner's UCX version differs from the
  // members' or it shares no transport with them (data_plane_compat.cc).
  absl::Status CheckDataPlane(const gradex::v1::JoinRequest& r) const;
  // The largest step member `id` may claim to run next now.
  uint64_t StepBound(uint64_t id, absl::Time now) const;

  // Quarantine of agents evicted at entry again and again (see strikes_).
  static constexpr int64_t kMaxQuarantineLeases = 64;
  static constexpr size_t kMaxStrikes = 4096;

 private:
  // False (and nothing formed) when the epoch numbers are exhausted.
  bool FormEpoch(std::vector<uint64_t> roster, uint64_t effective, bool immediate);
  std::vector<uint64_t> FreshOrder(std::vector<uint64_t> ids) const;
  void Evict(uint64_t id, MemberRecord::Cause cause, std::string why,
             std::vector<uint64_t>* evicted);
  // A collective job's failure unit is the node (membership_nodes.cc): after
  // `dead` (a member of the latest epoch, evicted for a failure) the other
  // members on its host go too.
  void EvictNodeOf(const MemberRecord& dead, std::vector<uint64_t>* evicted);
  // How many distinct hosts the members on `roster` have.
  int CountNodes(const std::vector<uint64_t>& roster) const;
  // The members BlameBadFrames named since the last Tick.
  void EvictBadFrameSenders(std::vector<uint64_t>* evicted);
  // The latest epoch's entry deadline.
  void CheckEntry(absl::Time now, std::vector<uint64_t>* evicted);
  // At that deadline: a member that a strict majority of the others' entry
  // waits end at (membership_faults.cc).
  void EvictBlamed(const Epoch& e, absl::Time now, std::vector<uint64_t>* evicted);
  // After a loss, once the settle window passed: also drops the members
  // silent for two heartbeat intervals. False while the
  // window is open.
  bool LossSettled(absl::Time now, std::vector<uint64_t>* evicted);

  JobSettings s_;
  std::map<uint64_t, MemberRecord> members_;
  std::map<std::string, uint64_t> by_agent_;
  std::deque<Epoch> epochs_;  // the last few, newest at the back
  std::vector<MemberRecord> last_evicted_;
  EpochNumber epoch_counter_ = 0;
  bool formed_any_ = false;  // this coordinator formed an epoch (vs. only rebuilt the count)
  // Rendezvous (no epoch yet): when it times out, and how many re-registering
  // agents ran the last epoch (0: a fresh job).
  bool rendezvous_open_ = false;
  absl::Time rendezvous_deadline_;
  int rebuild_world_ = 0;
  // Agents evicted at an entry deadline since the latest epoch formed: a
  // re-join of one waits for a barrier epoch (membership.cc, Tick). At most
  // one epoch's roster.
  std::set<std::string> held_back_;
  // Agents evicted at an entry deadline: how many times since they last
  // finished a step without error, and until when a re-join is refused. The first eviction
  // only holds a re-join back to the next barrier (above); from the second
  // on the agent id is quarantined for lease x 2^(count - 2), at most
  // kMaxQuarantineLeases leases, so a member that keeps stalling its entries
  // no longer costs the others one entry timeout per barrier. Bounded: the
  // oldest go past kMaxStrikes entries.
  struct Strikes {
    int count = 0;
    absl::Time until = absl::InfinitePast();
    absl::Time last = absl::InfinitePast();
  };
  std::map<std::string, Strikes> strikes_;
  // Members blamed for bad frames since the last Tick, and why (at most one
  // epoch's roster: only its members can be blamed).
  std::map<uint64_t, std::string> blamed_;
  absl::Time now_ = absl::InfinitePast();        // the latest Tick's clock (Evict runs in Tick)
  bool lost_ = false;                            // a member of the latest epoch left or was evicted
  absl::Time lost_at_ = absl::InfiniteFuture();  // when Tick first saw lost_
};

}  // namespace gradex::coordinator::membership

#endif  // GRADEX_SERVICES_COORDINATOR_MEMBERSHIP_MEMBERSHIP_H_
