#include "services/agent/agent.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "services/agent/epoch_sync.h"
#include "services/agent/link_probe.h"

namespace gradex::agent {
namespace {

// Sequence of the agreement that opens an epoch: the first exchange on a
// fresh communicator, so it cannot be confused with a barrier's.
constexpr uint64_t kEntrySequence = 0xffffff;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

uint64_t JobId(const std::string& job) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : job) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

Agent::Agent(AgentOptions options, ControlPlane* control, TransportProvider* transports,
             AgentMetrics* metrics)
    : options_(std::move(options)),
      job_id_(JobId(options_.job)),
      control_(control),
      transports_(transports),
      metrics_(metrics),
      residuals_(std::max(options_.buckets, 1), std::vector<float>(options_.elements, 0.0f)) {
  control_->SetWaitSource(waits_);
}

Agent::~Agent() = default;

absl::Status Agent::Start() { return Rejoin(); }

absl::Status Agent::Rejoin() {
  JoinRequest req;
  req.job = options_.job;
  req.token = options_.token;
  req.agent_id = options_.agent_id;
  req.host = options_.host;
  req.local_rank = options_.local_rank;
  req.device = options_.device;
  req.ucx_address = transports_->address();
  req.ucx_version = transports_->version();
  req.ucx_transports = transports_->transports();
  req.last_epoch = last_epoch_;
  req.last_rank = rank_;
  req.last_world_size = plan_ == nullptr ? 0 : plan_->world();
  req.next_step = next_step_;
  absl::StatusOr<JoinReply> reply = control_->Join(req, DeadlineIn(options_.rpc_timeout));
  if (!reply.ok()) return reply.status();
  lease_ = reply->lease;
  need_rejoin_ = false;
  return absl::OkStatus();
}

absl::Status Agent::EnterEpoch() {
  const Deadline deadline = DeadlineIn(options_.join_timeout);
  // After a failure the coordinator usually opens the next epoch by itself
  // (it evicts the dead peer); re-joining is the fallback when it does not
  // (everyone alive, e.g. a deadline), after twice the lease so an eviction
  // comes first and re-joins do not churn epochs.
  Clock::time_point rejoin_at = Clock::now() + 2 * lease_;
  absl::Status last = absl::OkStatus();
  for (;;) {
    if (need_rejoin_ && Clock::now() >= rejoin_at) {
      absl::Status s = Rejoin();
      if (s.code() == absl::StatusCode::kUnauthenticated ||
          s.code() == absl::StatusCode::kPermissionDenied ||
          s.code() == absl::StatusCode::kInvalidArgument) {
        return s;  // a refusal is final; anything else may be a restart
      }
      if (!s.ok()) last = s;
      need_rejoin_ = true;  // keep re-joining every period until an epoch comes
      rejoin_at = Clock::now() + 2 * lease_;
    }
    std::shared_ptr<const Plan> plan = control_->LatestPlan();
    if (plan != nullptr && plan->epoch > last_epoch_ && plan->RankOf(options_.agent_id) >= 0) {
      absl::Status s = Connect(plan, kEntrySequence);
      if (s.ok()) return s;
      // A member that never came (dead, unreachable, or gone to a newer
      // epoch): the coordinator hears which (the error names the peer), and
      // this agent waits for the next epoch.
      StepReport failed;
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
        if (!need_rejoin_) rejoin_at = Clock::now() + 2 * lease_;
        need_rejoin_ = true;
      }
    }
    if (Clock::now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(options_.agent_id, ": no epoch after ", last_epoch_, " includes this agent ",
                       "within ", options_.join_timeout.count(), " ms",
                       last.ok() ? "" : absl::StrCat(" (last error: ", last.message(), ")")));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

absl::Status Agent::Connect(std::shared_ptr<const Plan> plan, uint64_t sync_sequence) {
  transport_.reset();  // one communicator at a time on the worker
  rank_ = plan->RankOf(options_.agent_id);
  absl::StatusOr<std::unique_ptr<Transport>> t = transports_->Connect(*plan, rank_);
  if (!t.ok()) {
    return absl::Status(t.status().code(),
                        absl::StrCat("epoch ", plan->epoch, " connect: ", t.status().message()));
  }
  transport_ = waits_->Wrap(*std::move(t));
  // A newer epoch that drops one of this epoch's members (an eviction or a
  // leave) preempts the step in progress: this epoch cannot finish a step.
  waits_->SetPreemption([control = control_, running = plan]() -> std::optional<std::string> {
    std::shared_ptr<const Plan> p = control->LatestPlan();
    if (p == nullptr || p->epoch <= running->epoch) return std::nullopt;
    for (const PlanMember& m : running->members) {
      if (p->RankOf(m.agent_id) < 0) {
        return absl::StrCat("epoch ", running->epoch, " preempted: agent '", m.agent_id, "' (rank ",
                            m.rank, ") is not in epoch ", p->epoch);
      }
    }
    return std::nullopt;
  });
  waits_->SetStep(plan->epoch, next_step_);
  last_epoch_ = plan->epoch;
  SyncState mine;
  mine.next_step = next_step_;
  mine.newest_epoch = plan->epoch;
  mine.values = BarrierValues::From(*Eligible(next_step_, plan));
  absl::StatusOr<SyncState> agreed =
      AgreeInBand(*transport_, plan->epoch, sync_sequence, mine, DeadlineIn(options_.sync_timeout));
  if (!agreed.ok()) {
    transport_->Abort(DeadlineIn(std::chrono::milliseconds(1000)));
    transport_.reset();
    return agreed.status();
  }
  Plan p = *plan;
  agreed->values.ApplyTo(&p);
  plan_ = std::make_shared<const Plan>(std::move(p));
  next_step_ = agreed->next_step;
  synced_at_ = next_step_;
  if (absl::Status s = MakeAlgorithms(); !s.ok()) return Fail(s);
  link_.reset();
  if (plan_->measure_links && plan_->world() > 1) {
    // Every rank of the epoch probes here, right after the entry agreement;
    // a lost peer or the deadline fails like a step (the next epoch follows).
    absl::StatusOr<LinkEstimate> l =
        ProbeLinks(*transport_, plan_->epoch, DeadlineIn(plan_->step_deadline));
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

std::shared_ptr<const Plan> Agent::Eligible(uint64_t step, std::shared_ptr<const Plan> base,
                                            uint64_t* newest_epoch) const {
  std::shared_ptr<const Plan> best = base;
  if (newest_epoch != nullptr) *newest_epoch = base->epoch;
  // Walk the held versions down from the newest (a handful at most).
  for (std::shared_ptr<const Plan> p = control_->LatestPlan(); p != nullptr && p->version > 0;
       p = control_->PlanVersion(p->version - 1)) {
    if (p->effective_step > step) continue;
    if (newest_epoch != nullptr && p->epoch > *newest_epoch) *newest_epoch = p->epoch;
    if (p->epoch == base->epoch && p->version > best->version) best = p;
    if (p->version <= base->version) break;
  }
  return best;
}

absl::Status Agent::Barrier() {
  SyncState mine;
  mine.next_step = next_step_;
  mine.values = BarrierValues::From(*Eligible(next_step_, plan_, &mine.newest_epoch));
  waits_->SetStep(plan_->epoch, next_step_);
  const Clock::time_point start = Clock::now();
  absl::StatusOr<SyncState> agreed =
      AgreeInBand(*transport_, plan_->epoch, next_step_, mine, DeadlineIn(plan_->step_deadline));
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
  const bool new_algorithm = agreed->values.algorithm != plan_->algorithm;
  Plan p = *plan_;
  // k' per team position means nothing under another team count: the
  // algorithm's own controller runs until the coordinator's k' for the new
  // layout arrives.
  if (agreed->values.teams != p.teams) p.kprime.clear();
  agreed->values.ApplyTo(&p);
  p.version = std::max(p.version, agreed->values.plan_version);
  plan_ = std::make_shared<const Plan>(std::move(p));
  if (new_algorithm) {
    if (absl::Status s = MakeAlgorithms(); !s.ok()) return Fail(s);
  }
  return absl::OkStatus();
}

absl::Status Agent::MakeAlgorithms() {
  // Fresh objects per epoch too: their state (B-SAG's controller, Ok-Topk's
  // thresholds) was learnt for another P.
  algorithms_.clear();
  for (size_t b = 0; b < residuals_.size(); ++b) {
    absl::StatusOr<std::unique_ptr<SparseAllreduce>> a = CreateAllreduce(plan_->algorithm);
    if (!a.ok()) return a.status();
    algorithms_.push_back(*std::move(a));
  }
  return absl::OkStatus();
}

AllreduceOptions Agent::Options(int bucket) const {
  AllreduceOptions o;
  o.density = plan_->density;
  o.teams = plan_->teams;
  o.params = plan_->params;  // agreed at the barrier with the algorithm
  // k' needs no agreement: the newest plan's, whenever it arrived, as long as
  // it speaks of the same team layout.
  std::shared_ptr<const Plan> newest = control_->LatestPlan();
  const Plan& source = newest != nullptr && newest->epoch == plan_->epoch &&
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

absl::Status Agent::NameWait(absl::Status s, Clock::time_point since) const {
  if (s.code() != absl::StatusCode::kDeadlineExceeded) return s;
  std::optional<WaitInfo> w = waits_->LastTimeout(since);
  if (!w || plan_ == nullptr || w->peer < 0 || w->peer >= plan_->world()) return s;
  std::string agent = "?";
  for (const PlanMember& m : plan_->members) {
    if (m.rank == w->peer) agent = m.agent_id;
  }
  return absl::Status(s.code(),
                      absl::StrCat(s.message(), " [timed out after ", w->waited.count(),
                                   " ms waiting for rank ", w->peer, ", agent '", agent, "']"));
}

absl::Status Agent::Fail(absl::Status status) {
  if (transport_ != nullptr) {
    // Peers waiting on this rank fail now instead of at their deadline.
    transport_->Abort(DeadlineIn(std::chrono::milliseconds(1000)));
    transport_.reset();
  }
  need_rejoin_ = true;
  if (metrics_ != nullptr) metrics_->StepFailed();
  StepReport r;
  r.epoch = last_epoch_;
  r.step = next_step_;
  r.rank = rank_;
  r.ok = false;
  r.error = std::string(status.message());
  control_->ReportStep(std::move(r));
  return status;
}

absl::Status Agent::Step(std::span<const std::span<const float>> grads, StepOutcome* out) {
  if (grads.size() != residuals_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("step: ", grads.size(), " buckets given, ", residuals_.size(), " configured"));
  }
  for (const auto& g : grads) {
    if (g.size() != options_.elements) {
      return absl::InvalidArgumentError(
          absl::StrCat("step: a bucket of ", g.size(), " elements, expected ", options_.elements));
    }
  }
  const Clock::time_point start = Clock::now();
  const auto unix_start = std::chrono::system_clock::now();
  const double compute_s =
      last_step_end_ == Clock::time_point{} ? 0 : Seconds(start - last_step_end_);
  if (transport_ == nullptr) {
    if (absl::Status s = EnterEpoch(); !s.ok()) return s;
  } else if (plan_->tau > 0 && next_step_ % static_cast<uint64_t>(plan_->tau) == 0 &&
             next_step_ != synced_at_) {
    if (absl::Status s = Barrier(); !s.ok()) return s;
  }
  const uint64_t step = next_step_;
  waits_->SetStep(plan_->epoch, step);
  out->step = step;
  out->epoch = plan_->epoch;
  out->rank = rank_;
  out->world = plan_->world();
  out->plan_version = plan_->version;
  out->algorithm = plan_->algorithm;
  out->density = plan_->density;
  out->results.resize(grads.size());
  out->stats.assign(grads.size(), CallStats{});
  for (size_t b = 0; b < grads.size(); ++b) {
    CallContext ctx;
    ctx.transport = transport_.get();
    ctx.job_id = job_id_;
    ctx.epoch = plan_->epoch;
    ctx.call_id = step * grads.size() + b;  // unique per call, the same on every rank
    ctx.training_step = step;
    ctx.deadline = DeadlineIn(plan_->step_deadline);
    const Clock::time_point call_start = Clock::now();
    absl::Status s = algorithms_[b]->Run(ctx, Options(static_cast<int>(b)), grads[b], residuals_[b],
                                         &out->results[b], &out->stats[b]);
    if (!s.ok()) {
      s = NameWait(std::move(s), call_start);
      // Reported as this step; then the step is spent (its gradient stays in
      // the residual) and the next one is step + 1.
      absl::Status failed = Fail(
          absl::Status(s.code(), absl::StrCat("step ", step, " epoch ", plan_->epoch, " rank ",
                                              rank_, " of ", plan_->world(), " (", plan_->algorithm,
                                              ", bucket ", b, "): ", s.message())));
      ++next_step_;
      return failed;
    }
    if (metrics_ != nullptr) {
      const int q = std::max(plan_->world() / std::max(plan_->teams, 1), 1);
      metrics_->ObserveCall(plan_->algorithm, out->stats[b], options_.elements, residuals_[b],
                            out->results[b], rank_ % q);
    }
  }
  ++next_step_;
  last_step_end_ = Clock::now();
  out->seconds = Seconds(last_step_end_ - start);
  if (metrics_ != nullptr) {
    metrics_->StepOk();
    metrics_->SyncCounters(control_->report_drops());
  }
  Report(*out, compute_s, unix_start);
  return absl::OkStatus();
}

void Agent::Report(const StepOutcome& out, double compute_s,
                   std::chrono::system_clock::time_point unix_start) {
  auto ns = [](std::chrono::system_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  };
  StepReport r;
  r.comm_start_unix_ns = ns(unix_start);
  r.comm_end_unix_ns = ns(std::chrono::system_clock::now());
  const int q = std::max(out.world / std::max(plan_->teams, 1), 1);
  r.epoch = out.epoch;
  r.step = out.step;
  r.rank = out.rank;
  r.compute_s = compute_s;
  for (const CallStats& s : out.stats) {
    const auto kprime = static_cast<size_t>(s.Detail("kprime_used"));  // 0: none (k' controller)
    const auto post_gather = static_cast<size_t>(s.Detail("post_gather_count"));
    r.total_s += s.total_s;
    r.selection_s += s.phases.selection_s;
    r.communication_s += s.phases.communication_s;
    r.reduction_s += s.phases.reduction_s;
    r.post_gather_count += post_gather;
    r.kprime_used = std::max(r.kprime_used, kprime);
    r.sent_bytes += s.sent_bytes;
    r.recv_bytes += s.recv_bytes;
    r.result_nnz += s.result_nnz;
    r.buckets.push_back({options_.elements, out.rank % q, kprime, post_gather, s.result_nnz});
  }
  if (link_ && link_epoch_ == out.epoch) r.link = link_;
  control_->ReportStep(std::move(r));  // drops, never blocks
}

absl::Status Agent::Leave() {
  transport_.reset();
  return control_->Leave(DeadlineIn(options_.rpc_timeout));
}

}  // namespace gradex::agent
