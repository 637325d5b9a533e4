// The coordinator's state: membership, the controllers and the published
// plan, behind one mutex. The gRPC service calls it; the server's ticker
// calls Tick(). Plan watchers are told about new versions outside the lock.
#ifndef GRADEX_SERVICES_COORDINATOR_COORDINATOR_H_
#define GRADEX_SERVICES_COORDINATOR_COORDINATOR_H_

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gradex/v1/coordinator.pb.h"
#include "services/coordinator/controllers/bucket_controller.h"
#include "services/coordinator/controllers/ccr_profiler.h"
#include "services/coordinator/controllers/controllers.h"
#include "services/coordinator/controllers/server_shards.h"
#include "services/coordinator/controllers/team_choice.h"
#include "services/coordinator/hangs/stall_detector.h"
#include "services/coordinator/job_config.h"
#include "services/coordinator/membership/member_version.h"
#include "services/coordinator/membership/membership.h"
#include "services/coordinator/membership/membership_view.h"
#include "services/coordinator/metrics.h"
#include "services/coordinator/plan_builder.h"

namespace gradex::coordinator {

// A WatchPlan stream's hook. Called without the coordinator's lock held.
class PlanWatcher {
 public:
  virtual ~PlanWatcher() = default;
  virtual void PlanChanged() = 0;
  virtual void MemberGone() = 0;
  // A newer stream of the same member replaced this one.
  virtual void Superseded() = 0;
};

class Coordinator {
 public:
  // `metrics` may be null (tests of the logic alone).
  Coordinator(JobSettings settings, CoordinatorMetrics* metrics);

  absl::StatusOr<gradex::v1::JoinResponse> Join(const gradex::v1::JoinRequest& r, absl::Time now);
  absl::StatusOr<gradex::v1::HeartbeatResponse> Heartbeat(const gradex::v1::HeartbeatRequest& r,
                                                          absl::Time now);
  absl::Status Leave(const gradex::v1::LeaveRequest& r, absl::Time now);
  // NOT_FOUND for an unknown member; *accepted false for a stale report.
  absl::Status Report(const gradex::v1::StepReport& r, absl::Time now, bool* accepted);
  // Evictions, epochs, parameter publication, stall detection.
  void Tick(absl::Time now);

  // The call for `member` carries `secret`: NOT_FOUND for an unknown member
  // (join again), PERMISSION_DENIED for a secret that is not its own.
  absl::Status Authorize(uint64_t member, absl::string_view secret) const;

  // The latest plan (null before the first epoch).
  std::shared_ptr<const gradex::v1::Plan> plan() const;
  bool IsMember(uint64_t id) const;
  uint64_t epoch() const;
  size_t members() const;
  uint64_t stalled_steps() const;

  // One stream per member: a member's new stream supersedes (ends) the ones
  // it had, so a member cannot hold the coordinator's memory with streams.
  void Subscribe(uint64_t member, std::shared_ptr<PlanWatcher> w);
  size_t watchers() const;
  void Unsubscribe(const PlanWatcher* w);

  const JobSettings& settings() const { return s_; }

 private:
  void PublishLocked(uint64_t effective_step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NewEpochLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A parameter-server job's new epoch: assigns the server shards, logs them.
  void AssignShardsLocked(const membership::Epoch& e, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FeedControllersLocked(const gradex::v1::StepReport& r, int rank, int world, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckStallsLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts a stalled step against each of `ranks` of `run` (metrics).
  void BlameLocked(const membership::Epoch& run, const std::vector<int>& ranks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // auto_teams: feeds the epoch's link estimates and decides T once.
  void FeedAutoTeamsLocked(const gradex::v1::StepReport& r, int rank, int world)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateGaugesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The bucket controller and COVAP's profiler (bucket_controller.h,
  // ccr_profiler.h). The profiler marks agreed_ dirty when the interval
  // changes; the bucket controller's decisions wait for Tick (below).
  void FeedBucketsLocked(const gradex::v1::StepReport& r, int rank, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The plan barrier a bucket choice decided by the samples of `decided`
  // runs from: a step the agents reach only after the Tick that publishes
  // it (plan_lead_steps and one barrier period of slack for the reports'
  // and the tick's delay), so that where a switch falls depends on the
  // steps that decided it, not on when their reports arrived.
  uint64_t BucketSwitchStepLocked(uint64_t decided) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies the bucket choices whose switch step is `at` or earlier to
  // agreed_ (a plan effective at `at` carries them); true when that changed
  // agreed_.bucket_algorithms.
  bool ApplyBucketChoicesLocked(uint64_t at) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FeedProfilerLocked(const gradex::v1::StepReport& r, int rank)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The COVAP interval the plan gave `step` (from the publication history).
  int CovapIntervalAtLocked(uint64_t step) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool CovapInPlayLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells watchers (after mu_ is released).
  void Notify(const std::vector<uint64_t>& gone, bool plan_changed);

  const JobSettings s_;
  CoordinatorMetrics* const metrics_;
  const uint64_t incarnation_;

  mutable absl::Mutex mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  membership::Membership membership_ ABSL_GUARDED_BY(mu_);
  membership::ReleaseWarnings release_warnings_ ABSL_GUARDED_BY(mu_);
  AgreedParams agreed_ ABSL_GUARDED_BY(mu_);
  controllers::KPrimeTable kprime_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<controllers::BoundaryConsensus> consensus_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<controllers::CcrProfiler> profiler_ ABSL_GUARDED_BY(mu_);
  // (effective step, COVAP interval) of the latest publications that changed
  // it, oldest first; a few suffice (reports lag the plan by a few barriers).
  std::vector<std::pair<uint64_t, int>> covap_history_ ABSL_GUARDED_BY(mu_);
  controllers::BucketController buckets_ ABSL_GUARDED_BY(mu_);
  hangs::StallDetector stalls_ ABSL_GUARDED_BY(mu_);
  bool agreed_dirty_ ABSL_GUARDED_BY(mu_) = false;
  bool kprime_dirty_ ABSL_GUARDED_BY(mu_) = false;
  controllers::AutoTeams auto_teams_ ABSL_GUARDED_BY(mu_);
  int auto_last_teams_ ABSL_GUARDED_BY(mu_) = 0;  // the last automatic choice, for new epochs
  // k' feedback counts from this step on (reports of an older team layout
  // are ignored); the maximum while a new T waits for its barrier.
  uint64_t kprime_from_step_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_publish_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Starts at the start time in microseconds, so a restarted coordinator's
  // versions stay above its predecessor's (fewer than 10^6 plans a second).
  uint64_t version_ ABSL_GUARDED_BY(mu_);
  uint64_t stalled_steps_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<const gradex::v1::Plan> plan_ ABSL_GUARDED_BY(mu_);
  // Members whose watchers must end, and whether a plan is new, collected
  // under mu_ and delivered by Notify.
  std::vector<uint64_t> gone_ ABSL_GUARDED_BY(mu_);
  bool published_ ABSL_GUARDED_BY(mu_) = false;
  // Parameter-server jobs: who holds the server shards (server_shards.h).
  controllers::ServerShards shards_ ABSL_GUARDED_BY(mu_);
  // The membership view (gradex_coordinator_member_info), kept by UpdateGaugesLocked.
  membership::MembershipView view_ ABSL_GUARDED_BY(mu_);

  mutable absl::Mutex watch_mu_;
  std::vector<std::pair<uint64_t, std::shared_ptr<PlanWatcher>>> watchers_
      ABSL_GUARDED_BY(watch_mu_);
};

}  // namespace gradex::coordinator

#endif  // GRADEX_SERVICES_COORDINATOR_COORDINATOR_H_
