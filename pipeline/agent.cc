#include "pipeline/agent.h"

#include <algorithm>
#include <cstdio>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "catalog/fnv1a.h"
#include "member/epoch_preemption.h"
#include "member/epoch_sync.h"
#include "member/link_probe.h"

namespace gradex::pipeline {
namespace {

// Sequence of the agreement that opens an epoch: the first exchange on a
// fresh communicator, so it cannot be confused with a barrier's.
constexpr uint64_t kEntrySequence = 0xffffff;

}  // namespace

uint64_t JobId(const std::string& job) {
  return catalog::Fnv1a(job, catalog::kFnv1aTruncatedBasis);
}

Agent::Agent(AgentOptions options, member::ControlPlane* control,
             member::TransportProvider* transports, AgentMetrics* metrics)
    : options_(std::move(options)),
      job_id_(JobId(options_.job)),
      control_(control),
      transports_(transports),
      metrics_(metrics),
      rules_(options_.rules) {
  control_->SetWaitSource(waits_);
}

Agent::~Agent() = default;

absl::Status Agent::Start() {
  if (absl::Status s = member::CheckBucketRules(options_.rules); !s.ok()) return s;
  return Rejoin();
}

absl::Status Agent::Rejoin() {
  member::JoinRequest req = member::MemberJoin(options_, *transports_);
  req.last_epoch = last_epoch_;
  req.last_rank = rank_;
  req.last_world_size = plan_ == nullptr ? 0 : plan_->world();
  req.next_step = next_step_;
  absl::StatusOr<member::JoinReply> reply =
      control_->Join(req, transport::DeadlineIn(options_.rpc_timeout));
  if (!reply.ok()) return reply.status();
  lease_ = reply->lease;
  need_rejoin_ = false;
  return absl::OkStatus();
}

absl::Status Agent::EnterEpoch() {
  const transport::Deadline deadline = transport::DeadlineIn(options_.join_timeout);
  // After a failure the coordinator usually opens the next epoch by itself
  // (it evicts the dead peer); re-joining is the fallback when it does not
  // (everyone alive, e.g. a deadline), after twice the lease so an eviction
  // comes first and re-joins do not churn epochs.
  transport::Clock::time_point rejoin_at = transport::Clock::now() + 2 * lease_;
  absl::Status last = absl::OkStatus();
  for (;;) {
    if (need_rejoin_ && transport::Clock::now() >= rejoin_at) {
      absl::Status s = Rejoin();
      if (s.code() == absl::StatusCode::kUnauthenticated ||
          s.code() == absl::StatusCode::kPermissionDenied ||
          s.code() == absl::StatusCode::kInvalidArgument) {
        return s;  // a refusal is final; anything else may be a restart
      }
      if (!s.ok()) last = s;
      need_rejoin_ = true;  // keep re-joining every period until an epoch comes
      rejoin_at = transport::Clock::now() + 2 * lease_;
    }
    std::shared_ptr<const member::Plan> plan = control_->LatestPlan();
    if (plan != nullptr && plan->epoch > last_epoch_ && plan->RankOf(options_.agent_id) >= 0) {
      absl::Status s = Connect(plan, kEntrySequence);
      if (s.ok()) return s;
      // A member that never came (dead, unreachable, or gone to a newer
      // epoch): the coordinator hears which (the error names the peer), and
      // this agent waits for the next epoch.
      member::StepReport failed;
      failed.epoch = plan->epoch;
      failed.step = next_step_;
      failed.rank = plan->RankOf(options_.agent_id);
      failed.ok = false;
      failed.error = std::string(s.message());
      control_->ReportStep(std::move(failed));
      last = s;
      last_epoch_ = plan->epoch;
      // Superseded: take the newer epoch; anything else: wait for one, and
      // re-join if none comes.
      if (s.code() != absl::StatusCode::kAborted) {
        if (!need_rejoin_) rejoin_at = transport::Clock::now() + 2 * lease_;
        need_rejoin_ = true;
      }
    }
    if (transport::Clock::now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(options_.agent_id, ": no epoch after ", last_epoch_, " includes this agent ",
                       "within ", options_.join_timeout.count(), " ms",
                       last.ok() ? "" : absl::StrCat(" (last error: ", last.message(), ")")));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

absl::Status Agent::Connect(std::shared_ptr<const member::Plan> plan, uint64_t sync_sequence) {
  transport_.reset();  // one communicator at a time on the worker
  retired_.reset();
  step_transport_ = nullptr;
  rank_ = plan->RankOf(options_.agent_id);
  // Entry (wire-up, agreement) within the plan's entry timeout and one
  // lease: heartbeats name this epoch from now on, and the coordinator
  // judges a stalled entry by their waits at entry_timeout after it saw the
  // epoch start, which may lag this agent's start by a heartbeat interval
  // (lease / 3); the extra lease keeps the waits it judges by in them. A
  // judged entry is superseded, which ends it at once. The epoch starts for
  // the wire-up when a first peer answers (a late joiner waits for the
  // others' barrier before that): until then only the join timeout bounds it.
  const std::chrono::milliseconds entry_timeout =
      (plan->entry_timeout.count() > 0 ? plan->entry_timeout : options_.sync_timeout) + lease_;
  waits_->SetStep(plan->epoch, next_step_);
  // A newer epoch without one of this one's members ends the entry and steps.
  auto superseded = member::SupersededBy(control_, plan);
  member::ConnectHooks hooks;
  hooks.deadline = transport::DeadlineIn(std::max(options_.join_timeout, entry_timeout));
  hooks.quiet = entry_timeout;
  hooks.abandon = [superseded] { return superseded().has_value(); };
  // The wire-up's pending peers are waits like a step's receives: a member
  // that never connects is named in every peer's heartbeats.
  hooks.waiting = [w = waits_.get()](int peer, bool waiting) { w->WireUpWaiting(peer, waiting); };
  absl::StatusOr<std::unique_ptr<transport::Transport>> t =
      transports_->Connect(*plan, rank_, hooks);
  waits_->ClearWireUp();
  if (!t.ok()) {
    return absl::Status(t.status().code(),
                        absl::StrCat("epoch ", plan->epoch, " connect: ", t.status().message()));
  }
  transport_ = waits_->Wrap(*std::move(t));
  const transport::Deadline entry = transport::DeadlineIn(entry_timeout);
  waits_->SetPreemption(superseded);
  last_epoch_ = plan->epoch;
  member::SyncState mine;
  mine.next_step = next_step_;
  mine.newest_epoch = plan->epoch;
  mine.values = member::BarrierValues::From(*Eligible(next_step_, plan), options_.rules);
  absl::StatusOr<member::SyncState> agreed =
      member::AgreeInBand(*transport_, plan->epoch, sync_sequence, mine, entry);
  if (!agreed.ok()) {
    transport_->Abort(transport::DeadlineIn(std::chrono::milliseconds(1000)));
    transport_.reset();
    return agreed.status();
  }
  member::Plan p = *plan;
  agreed->values.ApplyTo(&p);
  plan_ = std::make_shared<const member::Plan>(std::move(p));
  AdoptRules(agreed->values.rules, agreed->values_rank);
  next_step_ = agreed->next_step;
  synced_at_ = next_step_;
  if (absl::Status s = CheckAlgorithms(); !s.ok()) return Fail(s);
  link_.reset();
  if (plan_->measure_links && plan_->world() > 1) {
    // Every rank of the epoch probes here, right after the entry agreement;
    // a lost peer or the deadline fails like a step (the next epoch follows).
    absl::StatusOr<member::LinkEstimate> l =
        member::ProbeLinks(*transport_, plan_->epoch, transport::DeadlineIn(plan_->step_deadline));
    if (!l.ok()) return Fail(l.status());
    link_ = *l;
    link_epoch_ = plan_->epoch;
  }
  if (metrics_ != nullptr) {
    metrics_->EpochChange();
    metrics_->Membership(plan_->epoch, plan_->world(), rank_);
  }
  return absl::OkStatus();
}

std::shared_ptr<const member::Plan> Agent::Eligible(uint64_t step,
                                                    std::shared_ptr<const member::Plan> base,
                                                    uint64_t* newest_epoch) const {
  std::shared_ptr<const member::Plan> best = base;
  if (newest_epoch != nullptr) *newest_epoch = base->epoch;
  // Walk the held versions down from the newest (a handful at most).
  for (std::shared_ptr<const member::Plan> p = control_->LatestPlan();
       p != nullptr && p->version > 0; p = control_->PlanVersion(p->version - 1)) {
    if (p->effective_step > step) continue;
    if (newest_epoch != nullptr && p->epoch > *newest_epoch) *newest_epoch = p->epoch;
    if (p->epoch == base->epoch && p->version > best->version) best = p;
    if (p->version <= base->version) break;
  }
  return best;
}

absl::Status Agent::Barrier() {
  member::SyncState mine;
  mine.next_step = next_step_;
  mine.values =
      member::BarrierValues::From(*Eligible(next_step_, plan_, &mine.newest_epoch), options_.rules);
  waits_->SetStep(plan_->epoch, next_step_);
  const transport::Clock::time_point start = transport::Clock::now();
  absl::StatusOr<member::SyncState> agreed = member::AgreeInBand(
      *transport_, plan_->epoch, next_step_, mine, transport::DeadlineIn(plan_->step_deadline));
  if (!agreed.ok()) return Fail(NameWait(agreed.status(), start));
  next_step_ = agreed->next_step;
  synced_at_ = next_step_;
  if (agreed->newest_epoch > plan_->epoch) {
    // Leave together at this barrier; every member enters the newest epoch
    // it holds (the same one, unless the stream skipped it for some: then
    // the entry fails and they converge on the next one).
    transport_.reset();
    last_epoch_ = plan_->epoch;
    return EnterEpoch();
  }
  member::Plan p = *plan_;
  // k' per team position means nothing under another team count: the
  // algorithm's own controller runs until the coordinator's k' for the new
  // layout arrives.
  if (agreed->values.teams != p.teams) p.kprime.clear();
  agreed->values.ApplyTo(&p);
  p.version = std::max(p.version, agreed->values.plan_version);
  plan_ = std::make_shared<const member::Plan>(std::move(p));
  // The same members agree again: the same lowest rank's rules.
  AdoptRules(agreed->values.rules, agreed->values_rank);
  // Buckets whose algorithm changed get fresh objects when they next run.
  if (absl::Status s = CheckAlgorithms(); !s.ok()) return Fail(s);
  return absl::OkStatus();
}

void Agent::AdoptRules(const member::BucketRules& agreed, int from) {
  rules_ = agreed;
  if (agreed == options_.rules || warned_rules_ == agreed) return;
  warned_rules_ = agreed;
  const member::BucketRules& own = options_.rules;
  auto warn = [&](const char* field, const auto& mine, const auto& theirs) {
    if (mine == theirs) return;
    ++rules_disagreements_;
    if (metrics_ != nullptr) metrics_->RulesDisagreement(field);
    // One line a field, once per agreed value: the trainer passed this rank
    // other hook arguments than its peers (the per-bucket rules must match).
    std::fprintf(stderr,
                 "gradex agent %s (rank %d, epoch %u): %s is %s here but %s on rank %d; every "
                 "rank uses rank %d's value (pass the same %s on every rank)\n",
                 options_.agent_id.c_str(), rank_, plan_->epoch, field, absl::StrCat(mine).c_str(),
                 absl::StrCat(theirs).c_str(), from, from, field);
  };
  warn("start_iter", own.start_iter, agreed.start_iter);
  warn("min_compression_rate", own.min_compression_rate, agreed.min_compression_rate);
  warn("dense_probe_period", own.dense_probe_period, agreed.dense_probe_period);
  warn("refuse_nonfinite", own.refuse_nonfinite, agreed.refuse_nonfinite);
  warn("hierarchy", std::string(own.hierarchy ? "auto" : "off"),
       std::string(agreed.hierarchy ? "auto" : "off"));
}

absl::Status Agent::CheckAlgorithms() const {
  // An algorithm this build lacks fails the epoch's entry (or the barrier)
  // on every rank alike, not a bucket in the middle of a step.
  absl::StatusOr<std::unique_ptr<collectives::SparseAllreduce>> a =
      collectives::CreateAllreduce(plan_->algorithm);
  if (!a.ok()) return a.status();
  for (const std::string& name : plan_->bucket_algorithms) {
    if (name.empty()) continue;
    if (absl::StatusOr<std::unique_ptr<collectives::SparseAllreduce>> b =
            collectives::CreateAllreduce(name);
        !b.ok()) {
      return b.status();
    }
  }
  return absl::OkStatus();
}

collectives::AllreduceOptions Agent::Options(int bucket) const {
  collectives::AllreduceOptions o;
  o.density = plan_->density;
  o.teams = plan_->teams;
  o.params = plan_->params;  // agreed at the barrier with the algorithm
  // k' needs no agreement: the newest plan's, whenever it arrived, as long as
  // it speaks of the same team layout.
  std::shared_ptr<const member::Plan> newest = control_->LatestPlan();
  const member::Plan& source = newest != nullptr && newest->epoch == plan_->epoch &&
                                       newest->teams == plan_->teams && newest->kprime.size() > 0
                                   ? *newest
                                   : *plan_;
  const int teams = std::max(plan_->teams, 1);
  const int position = rank_ % std::max(plan_->world() / teams, 1);
  if (bucket < static_cast<int>(source.kprime.size()) &&
      position < static_cast<int>(source.kprime[bucket].size())) {
    // The coordinator's k' controller steers the "kprime" parameter.
    o.params["kprime"] = static_cast<double>(source.kprime[bucket][position]);
  }
  return o;
}

absl::Status Agent::NameWait(absl::Status s, transport::Clock::time_point since) const {
  if (s.code() != absl::StatusCode::kDeadlineExceeded) return s;
  std::optional<member::WaitInfo> w = waits_->LastTimeout(since);
  if (!w || plan_ == nullptr || w->peer < 0 || w->peer >= plan_->world()) return s;
  std::string agent = "?";
  for (const member::PlanMember& m : plan_->members) {
    if (m.rank == w->peer) agent = m.agent_id;
  }
  return absl::Status(s.code(),
                      absl::StrCat(s.message(), " [timed out after ", w->waited.count(),
                                   " ms waiting for rank ", w->peer, ", agent '", agent, "']"));
}

absl::Status Agent::Fail(absl::Status status) {
  if (transport_ != nullptr) {
    // A peer the transport blamed (a flood of messages nobody received)
    // outside any call's frames (the epoch agreement, the in-band checks)
    // is reported as a call's refused frame would be.
    for (int p = 0; p < transport_->size() && step_blame_.peer() < 0; ++p) {
      if (absl::Status b = transport_->blame(p); !b.ok()) {
        step_blame_.Blame(p, std::string(b.message()));
      }
    }
    // Peers waiting on this rank fail now instead of at their deadline.
    transport_->Abort(transport::DeadlineIn(std::chrono::milliseconds(1000)));
    // Kept (aborted) until the step ends: a bucket of it may still be being
    // planned against it on the client's selection thread (PlanBucket).
    retired_ = std::move(transport_);
  }
  need_rejoin_ = true;
  if (metrics_ != nullptr) metrics_->StepFailed();
  member::StepReport r;
  r.epoch = last_epoch_;
  r.step = next_step_;
  r.rank = rank_;
  r.ok = false;
  r.error = std::string(status.message());
  // A frame this rank refused names its sender: the coordinator evicts it.
  if (const int blamed = step_blame_.peer(); blamed >= 0) {
    r.blamed_rank = blamed;
    r.blame = step_blame_.why();
  }
  control_->ReportStep(std::move(r));
  return status;
}

absl::Status Agent::Leave() {
  transport_.reset();
  retired_.reset();
  step_transport_ = nullptr;
  return control_->Leave(transport::DeadlineIn(options_.rpc_timeout));
}

}  // namespace gradex::pipeline
