// The Coordinator's controllers, fed by each accepted step report of the
// latest epoch (coordinator.h): B-SAG's k', Ok-Topk's boundary consensus, the
// automatic team count, the bucket controller and COVAP's CCR profiler. They
// mark agreed_ dirty; Tick publishes at the next plan barrier.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "catalog/bucket_algorithms.h"
#include "catalog/catalog.h"
#include "services/coordinator/coordinator.h"
#include "services/coordinator/log.h"

namespace gradex::coordinator {
namespace {

// Whether the CCR profiler measures `name`'s steps (the catalog's trait; false when unknown).
bool CcrProfiled(std::string_view name) {
  const catalog::AlgorithmSpec* spec = catalog::Find(name);
  return spec != nullptr && spec->traits.ccr_profiled;
}

}  // namespace

void Coordinator::FeedControllersLocked(const gradex::v1::StepReport& r, int rank, int world,
                                        absl::Time now) {
  if (s_.auto_teams) FeedAutoTeamsLocked(r, rank, world);
  for (const gradex::v1::BucketReport& b : r.buckets()) {
    if (s_.coordinate_kprime && b.kprime_used() > 0 && r.step() >= kprime_from_step_ &&
        kprime_.Feed(b.bucket(), b.elements(), b.team_position(), b.kprime_used(),
                     b.post_gather_count(), r.step(), world, agreed_.teams.teams, s_.density)) {
      kprime_dirty_ = true;
    }
    if (s_.coordinate_oktopk_regions && b.local_boundaries_size() > 0 && consensus_) {
      std::vector<uint32_t> inner(b.local_boundaries().begin(), b.local_boundaries().end());
      std::optional<controllers::AgreedRegions> done;
      consensus_->Feed(rank, b.bucket(), b.elements(), r.step(), inner, &done);
      if (done) {
        agreed_.regions[done->bucket] = std::move(*done);
        agreed_dirty_ = true;
      }
    }
  }
  FeedBucketsLocked(r, rank, now);
  FeedProfilerLocked(r, rank);
}

void Coordinator::FeedBucketsLocked(const gradex::v1::StepReport& r, int rank, absl::Time now) {
  if (r.has_link()) {
    buckets_.FeedLink(rank, r.step(), r.link().alpha_seconds(), r.link().beta_seconds_per_byte());
  }
  std::vector<controllers::BucketSample> samples;
  samples.reserve(r.buckets_size());
  for (const gradex::v1::BucketReport& b : r.buckets()) {
    if (b.bucket() != samples.size()) return;  // agents send a step's buckets in issue order
    samples.push_back({b.elements(), b.algorithm(), b.seconds(), b.dense_probe()});
  }
  buckets_.Feed(rank, r.step(), samples, now);
  for (const controllers::BucketSwitch& v : buckets_.TakeKeptSparse()) {
    Log("bucket ", v.bucket, ": sparse exchange ", v.sparse_seconds, " s, dense ", v.dense_seconds,
        " s (medians of the slowest rank over ", v.sparse_samples, " and ", v.dense_samples,
        " steps, to step ", v.decided_step,
        ") -> stays sparse (the warm-up's verdict: dense not faster by the margin; it will not "
        "switch to dense)");
  }
  for (const controllers::BucketSwitch& sw : buckets_.TakeSwitches()) {
    Log("bucket ", sw.bucket, ": sparse exchange ", sw.sparse_seconds, " s, dense ",
        sw.dense_seconds, " s (medians of the slowest rank over ", sw.sparse_samples, " and ",
        sw.dense_samples, " steps, to step ", sw.decided_step, ") -> ",
        sw.to_dense ? std::string(catalog::DenseFallbackAlgorithm()) : "sparse again",
        " from step ", BucketSwitchStepLocked(sw.decided_step), " (",
        sw.warmup ? "the warm-up's verdict, before it ran sparse; " : "", "switch ", sw.switches,
        "; no other before ", absl::FormatDuration(sw.hold), ")");
    if (metrics_) {
      (sw.to_dense ? metrics_->bucket_fallbacks_to_dense : metrics_->bucket_fallbacks_to_sparse)
          .Increment();
    }
  }
}

uint64_t Coordinator::BucketSwitchStepLocked(uint64_t decided) const {
  const uint64_t lead = static_cast<uint64_t>(std::max(s_.plan_lead_steps, 0)) +
                        static_cast<uint64_t>(std::max(s_.barrier_period, 1));
  return membership_.NextBarrier(std::min(decided, kMaxStep) + lead);
}

bool Coordinator::ApplyBucketChoicesLocked(uint64_t at) {
  // The decisions whose switch step is at or before `at`: NextBarrier(d +
  // lead) <= at holds for d + lead <= the last barrier at or before `at`.
  const uint64_t tau = static_cast<uint64_t>(std::max(s_.barrier_period, 1));
  const uint64_t lead = static_cast<uint64_t>(std::max(s_.plan_lead_steps, 0)) + tau;
  const uint64_t barrier = at / tau * tau;
  if (barrier < lead) return false;
  const uint64_t pending = buckets_.PendingSince();
  buckets_.Apply(barrier - lead, at);
  std::vector<std::string> now = buckets_.Choices();
  if (now == agreed_.bucket_algorithms) return false;
  if (s_.auto_algorithm) {
    // One line per change, the first few buckets named (a job has thousands).
    std::vector<std::string> changed;
    const size_t n = std::max(now.size(), agreed_.bucket_algorithms.size());
    size_t count = 0;
    for (size_t i = 0; i < n; ++i) {
      const std::string& a =
          i < agreed_.bucket_algorithms.size() ? agreed_.bucket_algorithms[i] : "";
      const std::string& b = i < now.size() ? now[i] : "";
      if (a == b) continue;
      if (++count <= 8) changed.push_back(absl::StrCat(i, ": ", b.empty() ? "(plan's)" : b));
    }
    Log("auto: alpha ", buckets_.alpha(), " s, beta ", buckets_.beta(), " s/B: bucket ",
        absl::StrJoin(changed, ", "), count > 8 ? absl::StrCat(" and ", count - 8, " more") : "",
        " from step ", at);
  }
  if (pending != controllers::BucketController::kNone && at > BucketSwitchStepLocked(pending)) {
    Log("bucket choices decided by step ", pending, " run from step ", at, ", not ",
        BucketSwitchStepLocked(pending), ": the ranks were past that barrier when they went out");
  }
  agreed_.bucket_algorithms = std::move(now);
  return true;
}

bool Coordinator::CovapInPlayLocked() const {
  if (CcrProfiled(agreed_.teams.algorithm)) return true;
  const std::string* last = nullptr;  // buckets repeat names: each run is looked up once
  for (const std::string& name : agreed_.bucket_algorithms) {
    if (last != nullptr && name == *last) continue;
    if (CcrProfiled(name)) return true;
    last = &name;
  }
  return false;
}

int Coordinator::CovapIntervalAtLocked(uint64_t step) const {
  for (auto it = covap_history_.rbegin(); it != covap_history_.rend(); ++it) {
    if (it->first <= step) return it->second;
  }
  return covap_history_.empty() ? agreed_.covap_interval : covap_history_.front().second;
}

void Coordinator::FeedProfilerLocked(const gradex::v1::StepReport& r, int rank) {
  if (!profiler_ || !CovapInPlayLocked()) return;
  // COVAP's CCR is against the uncompressed exchange: a step counts when its
  // buckets ran dense (warm-up steps, dense probes) or COVAP, whose time is
  // scaled by its interval; another sparse algorithm's time says nothing.
  bool covap = r.buckets_size() == 0 && CcrProfiled(agreed_.teams.algorithm);
  for (const gradex::v1::BucketReport& b : r.buckets()) {
    const std::string& name = b.algorithm().empty() ? agreed_.teams.algorithm : b.algorithm();
    if (b.dense_probe() || catalog::TraitsOf(name).dense) continue;
    if (!CcrProfiled(name)) return;
    covap = true;
  }
  const double exchange = r.comm_end_unix_ns() > r.comm_start_unix_ns()
                              ? (r.comm_end_unix_ns() - r.comm_start_unix_ns()) * 1e-9
                              : r.total_seconds();
  if (!profiler_->Feed(rank, r.step(), exchange, r.compute_seconds(),
                       covap ? CovapIntervalAtLocked(r.step()) : 1)) {
    return;
  }
  Log("COVAP profiler: CCR ", profiler_->ccr(), " over ", profiler_->samples(),
      " steps -> interval ", profiler_->interval(), " (was ", agreed_.covap_interval,
      ") at a plan barrier");
  agreed_.covap_ccr = profiler_->ccr();
  agreed_.covap_interval = profiler_->interval();
  agreed_dirty_ = true;
  // Prices COVAP's row for "auto".
  buckets_.SetCovapInterval(agreed_.covap_interval, r.step());
}

void Coordinator::FeedAutoTeamsLocked(const gradex::v1::StepReport& r, int rank, int world) {
  const controllers::TeamChoice& cur = agreed_.teams;
  const int q = std::max(world / std::max(cur.teams, 1), 1);
  for (const gradex::v1::BucketReport& b : r.buckets()) {
    // k'/k_block is only B-SAG's with teams; otherwise the model uses the
    // controller's start, 1/T.
    const bool observed = catalog::TraitsOf(cur.algorithm).kprime_controlled && cur.teams > 1 &&
                          b.team_position() < q && r.step() >= kprime_from_step_;
    auto kb = observed ? catalog::BlockKeep(b.elements(), q, b.team_position(), s_.density) : 0;
    auto_teams_.FeedBucket(b.elements(), observed ? b.kprime_used() : 0, kb);
  }
  if (!r.has_link()) return;
  auto_teams_.FeedLink(rank, r.link().alpha_seconds(), r.link().beta_seconds_per_byte());
  if (!auto_teams_.complete()) return;
  if (metrics_) {
    metrics_->link_alpha.Set(auto_teams_.alpha());
    metrics_->link_beta.Set(auto_teams_.beta());
  }
  std::optional<controllers::TeamDecision> d = auto_teams_.Decide(cur, s_.density);
  if (!d) return;
  Log("auto teams: alpha ", auto_teams_.alpha(), " s, beta ", auto_teams_.beta(), " s/B over ",
      world, " ranks: T=", cur.teams, " ", cur.algorithm, " ", d->current_seconds, " s, best ",
      d->best_seconds, " s",
      d->changed
          ? absl::StrCat(" -> T=", d->choice.teams, " ", d->choice.algorithm, " at a plan barrier")
          : " (kept: gain under 10%)");
  auto_last_teams_ = d->choice.teams;
  if (!d->changed) return;
  agreed_.teams = d->choice;
  agreed_dirty_ = true;
  // Bucket timings of another team layout mean nothing.
  buckets_.Configure(agreed_.teams.algorithm, s_.auto_algorithm, s_.density, world,
                     agreed_.teams.teams, membership_.MaxNextStep());
  agreed_.bucket_algorithms = buckets_.Choices();
  // k' of another team layout means nothing; the table restarts at the
  // barrier that switches T (Tick sets the step).
  kprime_.Reset();
  kprime_dirty_ = false;
  kprime_from_step_ = UINT64_MAX;
}

}  // namespace gradex::coordinator
