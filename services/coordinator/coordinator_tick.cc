// The Coordinator's tick: a new epoch's controllers and server shards, the
// plan's publication at a barrier the running ranks can see coming, and the gauges.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "catalog/node_layout.h"
#include "services/coordinator/coordinator.h"
#include "services/coordinator/log.h"

namespace gradex::coordinator {

void Coordinator::NewEpochLocked() {
  const membership::Epoch& e = membership_.latest();
  const int world = static_cast<int>(e.roster.size());
  agreed_.teams = controllers::ChooseTeams(
      s_.algorithm, s_.auto_teams && auto_last_teams_ > 0 ? auto_last_teams_ : s_.teams, world,
      s_.prefer_rsag || s_.auto_teams);
  auto_teams_.Reset(world);
  kprime_from_step_ = 0;
  agreed_.regions.clear();  // P+1 boundaries of another P mean nothing now
  kprime_.Reset();
  kprime_dirty_ = false;
  consensus_ = std::make_unique<controllers::BoundaryConsensus>(world);
  buckets_.SetCovapInterval(agreed_.covap_interval, e.effective_step);
  buckets_.Configure(agreed_.teams.algorithm, s_.auto_algorithm, s_.density, world,
                     agreed_.teams.teams, e.effective_step);
  agreed_.bucket_algorithms = buckets_.Choices();
  // COVAP's profiler, unless the job pins the interval; it measures while
  // COVAP is in play (the plan's algorithm or a bucket's).
  profiler_.reset();
  if (s_.covap_profile_steps > 0 && s_.params.count(kCovapInterval) == 0) {
    profiler_ = std::make_unique<controllers::CcrProfiler>(world, s_.covap_profile_steps,
                                                           agreed_.covap_interval);
  }
  stalls_.Reset();
  if (metrics_) {
    for (int r = 0; r < world; ++r) {
      const membership::MemberRecord* m = membership_.Find(e.roster[r]);
      metrics_->ExpectStallBlame(r, m ? m->host : "");
    }
  }
  Log("epoch ", e.number, ": ", world, " members, ", agreed_.teams.teams, " teams, algorithm ",
      agreed_.teams.algorithm, ", from step ", e.effective_step,
      e.immediate ? " (at once)" : " (at a plan barrier)");
  // The layout the agents compute from the plan's members (they decide, in
  // band, whether to run hierarchical on it).
  const catalog::NodeLayout layout = EpochLayout(membership_, e);
  const std::string flat =
      layout.ranks_per_node() == 0 ? std::string("uneven nodes") : catalog::FlatReason(layout);
  Log("epoch ", e.number, ": ", layout.Describe(),
      flat.empty() ? " (hierarchical exchange possible)" : absl::StrCat(" (flat: ", flat, ")"));
}

void Coordinator::AssignShardsLocked(const membership::Epoch& e, absl::Time now) {
  std::vector<controllers::ShardCandidate> roster;
  int servers = 0;
  for (uint64_t id : e.roster) {
    const membership::MemberRecord* r = membership_.Find(id);
    roster.push_back({id, r ? r->host : "", r != nullptr && r->server});
    servers += roster.back().server ? 1 : 0;
  }
  const uint64_t moves = shards_.moves();
  absl::StatusOr<controllers::ShardAssignment> a = shards_.Assign(roster, now);
  agreed_.ps = a.ok() ? *a : controllers::ShardAssignment{};
  if (metrics_) {
    metrics_->ps_shards.Set(shards_.shards());
    metrics_->ps_workers.Set(static_cast<double>(roster.size()) - servers);
    metrics_->ps_servers.Set(servers);
    metrics_->ps_unserved.Set(a.ok() ? 0 : 1);
    metrics_->ps_shard_moves.Increment(static_cast<double>(shards_.moves() - moves));
  }
  if (!a.ok()) {
    Log("epoch ", e.number, ": ", a.status().message(), " (since ",
        absl::FormatDuration(now - shards_.unserved_since()), ")");
    return;
  }
  std::vector<std::string> who;
  const std::vector<controllers::ShardRange> range =
      controllers::ShardRanges(s_.ps.layer_sizes, a->shards);
  for (uint32_t s = 0; s < a->shards; ++s) {
    const int rank = a->rank_of_shard[s];
    const membership::MemberRecord* r = membership_.Find(e.roster[rank]);
    who.push_back(absl::StrCat("shard ", s, " on rank ", rank, " [", range[s].first, ", ",
                               range[s].last, ") (agent '", Quote(r ? r->agent_id : ""), "' host '",
                               Quote(r ? r->host : ""), "')"));
  }
  Log("epoch ", e.number, ": ", roster.size() - servers, " workers, ", servers, " servers; ",
      absl::StrJoin(who, ", "));
}

void Coordinator::PublishLocked(uint64_t effective_step) {
  if (!membership_.has_epoch()) return;
  ++version_;
  gradex::v1::Plan p = BuildPlan(s_, membership_, membership_.latest(), version_, effective_step,
                                 agreed_, kprime_.Values());
  // The probe feeds the automatic team count and the per-bucket choice.
  p.set_measure_links(s_.auto_teams || s_.auto_algorithm);
  if (covap_history_.empty() || covap_history_.back().second != agreed_.covap_interval) {
    if (covap_history_.size() >= 16) covap_history_.erase(covap_history_.begin());
    covap_history_.push_back({effective_step, agreed_.covap_interval});
  }
  plan_ = std::make_shared<const gradex::v1::Plan>(std::move(p));
  published_ = true;
  if (metrics_) metrics_->plans_published.Increment();
}

void Coordinator::Tick(absl::Time now) {
  std::vector<uint64_t> gone;
  bool changed = false;
  {
    absl::MutexLock lock(&mu_);
    std::vector<uint64_t> evicted;
    const bool formed = membership_.Tick(now, &evicted);
    for (const membership::MemberRecord& m : membership_.last_evicted()) {
      const uint64_t id = m.id;
      Log("evicted member ", id, " (agent '", Quote(m.agent_id), "' on host '", Quote(m.host),
          "'): ", m.eviction);
      if (metrics_) {
        metrics_->evictions.Increment();
        if (m.cause == membership::MemberRecord::Cause::kEntry)
          metrics_->entry_evictions.Increment();
        if (m.cause == membership::MemberRecord::Cause::kNode) metrics_->node_evictions.Increment();
      }
      gone_.push_back(id);
    }
    if (formed) {
      NewEpochLocked();
      if (s_.ps.enabled) AssignShardsLocked(membership_.latest(), now);
      agreed_dirty_ = kprime_dirty_ = false;
      PublishLocked(membership_.latest().effective_step);
      last_publish_ = now;
    } else if (membership_.has_epoch() &&
               (agreed_dirty_ || buckets_.PendingSince() != controllers::BucketController::kNone)) {
      // Values all ranks agree on: at a barrier the running ranks can still
      // see coming, never before the plan they replace. Bucket choices go
      // out alone at the barrier their deciding steps name (one plan per
      // tick, in step order), or with other values once that barrier is due.
      uint64_t at = membership_.NextBarrier(membership_.MaxNextStep() + s_.plan_lead_steps);
      if (plan_) at = std::max<uint64_t>(at, plan_->effective_step());
      const uint64_t pending = buckets_.PendingSince();
      if (!agreed_dirty_) at = std::max(at, BucketSwitchStepLocked(pending));
      const bool buckets = ApplyBucketChoicesLocked(at);
      if (agreed_dirty_ || buckets) {
        if (kprime_from_step_ == UINT64_MAX) kprime_from_step_ = at;  // a new T from `at`
        agreed_dirty_ = kprime_dirty_ = false;
        PublishLocked(at);
        last_publish_ = now;
      }
    } else if (membership_.has_epoch() && kprime_dirty_ &&
               now - last_publish_ >= s_.min_publish_interval) {
      kprime_dirty_ = false;
      PublishLocked(plan_ ? plan_->effective_step() : membership_.latest().effective_step);
      last_publish_ = now;
    }
    CheckStallsLocked(now);
    UpdateGaugesLocked();
    gone.swap(gone_);
    changed = published_;
    published_ = false;
  }
  Notify(gone, changed);
}

void Coordinator::UpdateGaugesLocked() {
  if (!metrics_) return;
  const bool has = membership_.has_epoch();
  metrics_->epoch.Set(has ? static_cast<double>(membership_.latest().number) : 0);
  const size_t pending = membership_.pending();
  metrics_->members_active.Set(static_cast<double>(membership_.size() - pending));
  metrics_->members_pending.Set(static_cast<double>(pending));
  metrics_->plan_version.Set(static_cast<double>(version_));
  metrics_->covap_ccr.Set(agreed_.covap_ccr);
  metrics_->covap_interval.Set(agreed_.covap_interval);
  metrics_->teams.Set(agreed_.teams.teams);
  metrics_->buckets_dense.Set(buckets_.dense_buckets());
  const bool laid_out = has && plan_ != nullptr;
  metrics_->nodes.Set(laid_out ? plan_->layout().nodes() : 0);
  metrics_->ranks_per_node.Set(laid_out ? plan_->layout().ranks_per_node() : 0);
  view_.Update(membership_, agreed_.ps, s_.ps);
}

}  // namespace gradex::coordinator
