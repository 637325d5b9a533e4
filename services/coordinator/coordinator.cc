#include "services/coordinator/coordinator.h"

#include <algorithm>

#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "catalog/bucket_algorithms.h"
#include "catalog/catalog.h"
#include "services/coordinator/log.h"
#include "services/coordinator/member_secret.h"
#include "services/coordinator/wait_graph.h"
#include "version/version.h"

namespace gradex::coordinator {

Coordinator::Coordinator(JobSettings settings, CoordinatorMetrics* metrics)
    : s_(std::move(settings)),
      metrics_(metrics),
      incarnation_(std::random_device{}() * 0x100000000ull + std::random_device{}()),
      rng_(std::random_device{}() ^ (incarnation_ << 1)),
      membership_(s_),
      stalls_(s_.step_deadline),
      version_(static_cast<uint64_t>(absl::ToUnixMicros(absl::Now()))),
      shards_(s_.ps.server_shards, s_.ps.max_workers),
      view_(metrics ? &metrics->member_info : nullptr,
            metrics ? &metrics->members_unlisted : nullptr) {
  agreed_.teams =
      ChooseTeams(s_.algorithm, s_.teams, s_.world_size, s_.prefer_rsag || s_.auto_teams);
  // A pinned interval (params.covap_interval) is what the plan carries.
  auto pinned = s_.params.find(kCovapInterval);
  agreed_.covap_interval =
      pinned != s_.params.end() ? static_cast<int>(pinned->second) : s_.covap_interval;
  covap_history_.push_back({0, agreed_.covap_interval});
  UpdateGaugesLocked();
}

absl::StatusOr<gradex::v1::JoinResponse> Coordinator::Join(const gradex::v1::JoinRequest& r,
                                                           absl::Time now) {
  if (absl::Status v = CheckWireProtocol(r); !v.ok()) return v;
  absl::MutexLock lock(&mu_);
  if (OtherRelease(r)) {
    if (metrics_) metrics_->version_mismatch_joins.Increment();
    if (release_warnings_.FirstSight(r.gradex_version())) {
      Log("warning: agent '", Quote(r.agent_id()), "' on '", Quote(r.host()), "' runs gradex ",
          Quote(r.gradex_version()), ", this coordinator ", Version(),
          " (same wire protocol, so it joins; run one release in a job)");
    }
  }
  uint64_t id = 0;
  while (id == 0 || membership_.Find(id) != nullptr) id = rng_();
  uint64_t replaced = 0;
  absl::Status st = membership_.Join(r, id, now, &replaced);
  if (!st.ok()) return st;
  if (replaced != 0) gone_.push_back(replaced);  // its watchers end at the next tick
  std::string secret = NewMemberSecret();
  membership_.SetSecret(id, secret);
  if (metrics_) (r.last_epoch() > 0 ? metrics_->joins_rejoin : metrics_->joins_fresh).Increment();
  Log("join: member ", id, " agent '", Quote(r.agent_id()), "' host '", Quote(r.host()),
      "' local rank ", r.local_rank(),
      r.last_epoch() > 0
          ? absl::StrCat(" (rejoin, last epoch ", r.last_epoch(), " rank ", r.last_rank(), ")")
          : "");
  UpdateGaugesLocked();
  gradex::v1::JoinResponse resp;
  resp.set_member_id(id);
  const int64_t lease_ms = absl::ToInt64Milliseconds(s_.lease);
  resp.set_lease_duration_ms(static_cast<uint32_t>(lease_ms));
  resp.set_heartbeat_interval_ms(static_cast<uint32_t>(std::max<int64_t>(lease_ms / 3, 1)));
  resp.set_coordinator_incarnation(incarnation_);
  resp.set_member_secret(std::move(secret));
  gradex::v1::JobPlanConfig* plan = resp.mutable_plan_config();
  plan->set_algorithm(s_.auto_algorithm ? kAutoAlgorithm : s_.algorithm);
  plan->set_density(s_.density);
  plan->set_teams(s_.teams);
  plan->set_auto_teams(s_.auto_teams);
  for (const auto& [name, value] : s_.params) (*plan->mutable_params())[name] = value;
  return resp;
}

absl::StatusOr<gradex::v1::HeartbeatResponse> Coordinator::Heartbeat(
    const gradex::v1::HeartbeatRequest& r, absl::Time now) {
  absl::MutexLock lock(&mu_);
  absl::Status st = membership_.Heartbeat(r, now);
  if (!st.ok()) return st;
  gradex::v1::HeartbeatResponse resp;
  resp.set_lease_duration_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(s_.lease)));
  resp.set_plan_version(version_);
  resp.set_epoch(membership_.has_epoch() ? membership_.latest().number : 0);
  return resp;
}

absl::Status Coordinator::Leave(const gradex::v1::LeaveRequest& r, absl::Time now) {
  {
    absl::MutexLock lock(&mu_);
    absl::Status st = membership_.Leave(r.member_id());
    if (!st.ok()) return st;
    if (metrics_) metrics_->leaves.Increment();
    Log("leave: member ", r.member_id(), r.reason().empty() ? "" : ": ", Quote(r.reason()));
    gone_.push_back(r.member_id());
  }
  Tick(now);  // the survivors' new epoch goes out now, not at the next tick
  return absl::OkStatus();
}

absl::Status Coordinator::Report(const gradex::v1::StepReport& r, absl::Time now, bool* accepted) {
  absl::MutexLock lock(&mu_);
  *accepted = false;
  const MemberRecord* m = membership_.Find(r.member_id());
  if (m == nullptr) return absl::NotFoundError("unknown member: join again");
  if (absl::Status st = membership_.CheckEpoch("epoch", r.epoch()); !st.ok()) return st;
  if (r.step() >= kMaxStep) return absl::InvalidArgumentError("step: over 2^48");
  if (absl::Status st = membership_.CheckStep(r.member_id(), "step", r.step() + 1, now); !st.ok()) {
    return st;
  }
  membership_.NoteStep(r.member_id(), r.step(), now);
  membership_.NoteEpoch(r.member_id(), r.epoch());
  const Epoch* e = membership_.FindEpoch(r.epoch());
  const int rank = e ? membership_.RankIn(*e, r.member_id()) : -1;
  if (rank < 0) {
    if (metrics_) metrics_->reports_ignored.Increment();
    return absl::OkStatus();
  }
  *accepted = true;
  if (metrics_) metrics_->reports_accepted.Increment();
  if (!r.error().empty()) {
    if (metrics_) metrics_->step_failures.Increment();
    Log("step ", r.step(), " failed on rank ", rank, " (member ", r.member_id(), ", host '",
        Quote(m->host), "', epoch ", r.epoch(), "): ", Quote(r.error()));
    // A frame it refused names its sender, a rank of the same epoch (bounded
    // by its roster): that member goes at the next tick.
    if (const uint32_t b = r.blamed_rank_plus_one(); b > 0 && b <= e->roster.size()) {
      const int blamed = static_cast<int>(b - 1);
      if (membership_.BlameBadFrames(
              r.member_id(), *e, blamed,
              absl::StrCat("sent a frame that rank ", rank, " refused in step ", r.step(),
                           " of epoch ", r.epoch(), " (blamed by member ", r.member_id(), ")"))) {
        if (metrics_) metrics_->bad_frame_blames.Increment();
      }
    }
    return absl::OkStatus();
  }
  membership_.StepSucceeded(r.member_id());
  // Controllers follow the latest epoch only (they restart with each epoch).
  if (&membership_.latest() == e) {
    FeedControllersLocked(r, rank, static_cast<int>(e->roster.size()));
  }
  return absl::OkStatus();
}

void Coordinator::NewEpochLocked() {
  const Epoch& e = membership_.latest();
  const int world = static_cast<int>(e.roster.size());
  agreed_.teams =
      ChooseTeams(s_.algorithm, s_.auto_teams && auto_last_teams_ > 0 ? auto_last_teams_ : s_.teams,
                  world, s_.prefer_rsag || s_.auto_teams);
  auto_teams_.Reset(world);
  kprime_from_step_ = 0;
  agreed_.regions.clear();  // P+1 boundaries of another P mean nothing now
  kprime_.Reset();
  kprime_dirty_ = false;
  consensus_ = std::make_unique<BoundaryConsensus>(world);
  buckets_.SetCovapInterval(agreed_.covap_interval);
  buckets_.Configure(agreed_.teams.algorithm, s_.auto_algorithm, s_.density, world,
                     agreed_.teams.teams);
  agreed_.bucket_algorithms = buckets_.Choices();
  // COVAP's profiler, unless the job pins the interval; it measures while
  // COVAP is in play (the plan's algorithm or a bucket's).
  profiler_.reset();
  if (s_.covap_profile_steps > 0 && s_.params.count(kCovapInterval) == 0) {
    profiler_ =
        std::make_unique<CcrProfiler>(world, s_.covap_profile_steps, agreed_.covap_interval);
  }
  stalls_.Reset();
  if (metrics_) {
    for (int r = 0; r < world; ++r) {
      const MemberRecord* m = membership_.Find(e.roster[r]);
      metrics_->ExpectStallBlame(r, m ? m->host : "");
    }
  }
  Log("epoch ", e.number, ": ", world, " members, ", agreed_.teams.teams, " teams, algorithm ",
      agreed_.teams.algorithm, ", from step ", e.effective_step,
      e.immediate ? " (at once)" : " (at a plan barrier)");
}

void Coordinator::AssignShardsLocked(const Epoch& e, absl::Time now) {
  std::vector<ShardCandidate> roster;
  int servers = 0;
  for (uint64_t id : e.roster) {
    const MemberRecord* r = membership_.Find(id);
    roster.push_back({id, r ? r->host : "", r != nullptr && r->server});
    servers += roster.back().server ? 1 : 0;
  }
  const uint64_t moves = shards_.moves();
  absl::StatusOr<ShardAssignment> a = shards_.Assign(roster, now);
  agreed_.ps = a.ok() ? *a : ShardAssignment{};
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
  const std::vector<ShardRange> range = ShardRanges(s_.ps.layer_sizes, a->shards);
  for (uint32_t s = 0; s < a->shards; ++s) {
    const int rank = a->rank_of_shard[s];
    const MemberRecord* r = membership_.Find(e.roster[rank]);
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
    for (const MemberRecord& m : membership_.last_evicted()) {
      const uint64_t id = m.id;
      Log("evicted member ", id, " (agent '", Quote(m.agent_id), "' on host '", Quote(m.host),
          "'): ", m.eviction);
      if (metrics_) {
        metrics_->evictions.Increment();
        if (m.cause == MemberRecord::Cause::kEntry) metrics_->entry_evictions.Increment();
      }
      gone_.push_back(id);
    }
    if (formed) {
      NewEpochLocked();
      if (s_.ps.enabled) AssignShardsLocked(membership_.latest(), now);
      agreed_dirty_ = kprime_dirty_ = false;
      PublishLocked(membership_.latest().effective_step);
      last_publish_ = now;
    } else if (membership_.has_epoch() && agreed_dirty_) {
      // Values all ranks agree on: at a barrier the running ranks can still
      // see coming, never before the plan they replace.
      uint64_t at = membership_.NextBarrier(membership_.MaxNextStep() + s_.plan_lead_steps);
      if (plan_) at = std::max<uint64_t>(at, plan_->effective_step());
      if (kprime_from_step_ == UINT64_MAX) kprime_from_step_ = at;  // a new T from `at`
      agreed_dirty_ = kprime_dirty_ = false;
      PublishLocked(at);
      last_publish_ = now;
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

void Coordinator::CheckStallsLocked(absl::Time now) {
  if (!membership_.has_epoch()) return;
  // The running epoch: the newest whose effective step some member reached.
  const Epoch* run = &membership_.latest();
  const uint64_t furthest = membership_.MaxNextStep();
  for (uint64_t n = run->number; run->effective_step > furthest && n > 1;) {
    const Epoch* older = membership_.FindEpoch(--n);
    if (older == nullptr) break;
    run = older;
  }
  std::vector<uint64_t> progress;
  for (uint64_t id : run->roster) {
    const MemberRecord* m = membership_.Find(id);
    // A lost member is the next epoch's business; its rank is not waited on.
    progress.push_back(m ? std::max(m->next_step, run->effective_step) : 0);
  }
  if (progress.size() != run->roster.size()) return;
  int behind = 0;
  std::optional<Stall> st = stalls_.Check(progress, now, &behind);
  if (metrics_) metrics_->stalled_ranks.Set(behind);
  // Heartbeats' waits: a name for a hang in which nobody is behind (every
  // rank stuck in one step), and whom the laggards' peers wait on.
  const EpochWaits waits = ScanWaits(membership_, *run, now);
  // Silent: two heartbeat intervals (lease / 3 each) without one.
  const absl::Duration silence = s_.lease * 2 / 3;
  const bool from_waits = waits.any && stalls_.CheckWaits(waits.step, waits.oldest, now);
  if (from_waits) {
    ++stalled_steps_;
    if (metrics_) metrics_->stalled_steps.Increment();
    Log("step ", waits.step, " stalled in epoch ", run->number, " (waiting for ",
        absl::FormatDuration(absl::Trunc(waits.oldest, absl::Milliseconds(1))),
        "): ", DescribeHang(membership_, *run, waits, now, silence));
    // Blamed: where the waits end (a rank not in the exchange), or a cycle's ranks.
    std::vector<int> blamed;
    const WaitDiagnosis d = DiagnoseWaits(waits.waits_on);
    for (const auto* list : {&d.causes, &d.cycles}) {
      for (const WaitCause& c : *list) blamed.insert(blamed.end(), c.ranks.begin(), c.ranks.end());
    }
    BlameLocked(*run, blamed);
  }
  if (!st) return;
  if (!st->diagnosed && !(from_waits && st->step == waits.step)) {  // else counted from the waits
    ++stalled_steps_;
    if (metrics_) metrics_->stalled_steps.Increment();
    BlameLocked(*run, st->ranks);  // the laggards
  }
  std::vector<std::string> who;
  for (size_t i = 0; i < st->ranks.size(); ++i) {
    const MemberRecord* m = membership_.Find(run->roster[st->ranks[i]]);
    who.push_back(absl::StrCat(st->ranks[i], " (", m ? m->host : "?", ", next step ",
                               st->next_steps[i], ")"));
  }
  Log("step ", st->step, " stalled in epoch ", run->number, ": ranks ", absl::StrJoin(who, ", "),
      " have not arrived (the furthest rank finished step ", st->frontier - 1, ")",
      waits.any ? "; " : "", DescribeHang(membership_, *run, waits, now, silence));
}

void Coordinator::BlameLocked(const Epoch& run, const std::vector<int>& ranks) {
  if (!metrics_) return;
  for (int r : ranks) {
    if (r < 0 || static_cast<size_t>(r) >= run.roster.size()) continue;
    const MemberRecord* m = membership_.Find(run.roster[r]);
    metrics_->BlameStall(r, m ? m->host : "");
  }
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
  view_.Update(membership_, agreed_.ps, s_.ps);
}

void Coordinator::Notify(const std::vector<uint64_t>& gone, bool plan_changed) {
  std::vector<std::pair<uint64_t, std::shared_ptr<PlanWatcher>>> ws;
  {
    absl::MutexLock lock(&watch_mu_);
    ws = watchers_;
  }
  for (auto& [member, w] : ws) {
    if (std::find(gone.begin(), gone.end(), member) != gone.end()) {
      w->MemberGone();
    } else if (plan_changed) {
      w->PlanChanged();
    }
  }
}

std::shared_ptr<const gradex::v1::Plan> Coordinator::plan() const {
  absl::MutexLock lock(&mu_);
  return plan_;
}

absl::Status Coordinator::Authorize(uint64_t member, absl::string_view secret) const {
  absl::MutexLock lock(&mu_);
  const MemberRecord* m = membership_.Find(member);
  if (m == nullptr) return absl::NotFoundError("unknown member: join again");
  if (!SecretMatches(m->secret, secret)) {
    return absl::PermissionDeniedError(absl::StrCat("member_secret is not member ", member,
                                                    "'s (a member speaks only for itself)"));
  }
  return absl::OkStatus();
}

bool Coordinator::IsMember(uint64_t id) const {
  absl::MutexLock lock(&mu_);
  return membership_.Find(id) != nullptr;
}

uint64_t Coordinator::epoch() const {
  absl::MutexLock lock(&mu_);
  return membership_.has_epoch() ? membership_.latest().number : 0;
}

size_t Coordinator::members() const {
  absl::MutexLock lock(&mu_);
  return membership_.size();
}

uint64_t Coordinator::stalled_steps() const {
  absl::MutexLock lock(&mu_);
  return stalled_steps_;
}

void Coordinator::Subscribe(uint64_t member, std::shared_ptr<PlanWatcher> w) {
  std::vector<std::shared_ptr<PlanWatcher>> old;
  {
    absl::MutexLock lock(&watch_mu_);
    for (auto it = watchers_.begin(); it != watchers_.end();) {
      if (it->first == member) {
        old.push_back(std::move(it->second));
        it = watchers_.erase(it);
      } else {
        ++it;
      }
    }
    watchers_.emplace_back(member, std::move(w));
  }
  for (const std::shared_ptr<PlanWatcher>& o : old) o->Superseded();  // without the lock
}

size_t Coordinator::watchers() const {
  absl::MutexLock lock(&watch_mu_);
  return watchers_.size();
}

void Coordinator::Unsubscribe(const PlanWatcher* w) {
  absl::MutexLock lock(&watch_mu_);
  watchers_.erase(std::remove_if(watchers_.begin(), watchers_.end(),
                                 [w](const auto& p) { return p.second.get() == w; }),
                  watchers_.end());
}

}  // namespace gradex::coordinator
