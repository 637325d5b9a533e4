// PsWorker (ps_worker.h): the worker's epochs around ps/dgs_exchange.h's DgsPushPull,
// followed between steps by a thread of its own (Follow).
#include "ps/ps_worker.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "member/grpc_control_plane.h"
#include "member/member_wiring.h"
#include "pipeline/agent_metrics.h"
#include "ps/dgs_exchange.h"
#include "ps/dgs_layout.h"
#include "ps/dgs_worker.h"
#include "ps/ps_hosted_server.h"
#include "ps/ps_member.h"
#include "ps/ps_worker_config.h"
#include "ps/ps_worker_metrics.h"
#include "services/client/embedded_coordinator.h"

namespace gradex::ps {
namespace {

std::atomic<uint64_t> g_workers{0};  // agent ids stay unique across workers of one process

class PsWorkerImpl final : public PsWorker {
 public:
  explicit PsWorkerImpl(PsWorkerOptions o) : o_(std::move(o)) {}
  ~PsWorkerImpl() override { (void)Close(); }

  absl::Status Start(const client::Rendezvous& rendezvous);
  absl::Status Step(std::span<const float> grad, std::span<float> params, float lr) override;
  PsWorkerStats Stats() const override {
    absl::MutexLock lock(&mu_);
    return stats_;
  }
  absl::Status Close() override;
  int metrics_port() const override { return metrics_ ? metrics_->port() : -1; }

 private:
  absl::Status EnterEpoch(transport::Deadline deadline);
  void Follow();
  std::string Where() const;
  // Who holds the shards in the current epoch, for errors.
  std::string Servers() const;

  PsWorkerOptions o_;
  DgsLayout layout_ = *DgsLayout::Create({1});
  client::CoordinatorEndpoint endpoint_;
  std::unique_ptr<pipeline::AgentMetrics> metrics_;  // the registry served on metrics_port
  std::unique_ptr<ps::PsServerMetrics> server_metrics_;
  std::unique_ptr<PsWorkerMetrics> worker_metrics_;
  std::unique_ptr<HostedServer> hosted_;
  std::unique_ptr<member::ControlPlane> control_;
  std::unique_ptr<member::TransportProvider> transports_;
  std::unique_ptr<ps::PsMember> member_;
  std::shared_ptr<const member::Plan> plan_;
  std::unique_ptr<transport::Transport> transport_;
  std::optional<DgsWorkerState> state_;
  std::optional<DgsPushPull> exchange_;
  std::vector<uint64_t> versions_;  // last version applied, per shard
  uint32_t running_ = 0;            // the epoch exchange_ runs in
  bool closed_ = false;
  // Step and Follow take turns on the members above (Follow only tries).
  absl::Mutex step_mu_;
  std::thread follower_;
  std::atomic<bool> stop_following_{false};
  uint32_t entered_between_steps_ = 0;  // epochs Follow entered; the next Step reports them
  uint32_t failed_between_steps_ = 0;   // the epoch Follow last failed to enter
  mutable absl::Mutex mu_;
  PsWorkerStats stats_ ABSL_GUARDED_BY(mu_);
};

absl::Status PsWorkerImpl::Start(const client::Rendezvous& rendezvous) {
  layout_ = *DgsLayout::Create(o_.layer_sizes);
  absl::StatusOr<client::CoordinatorEndpoint> e =
      client::FindCoordinator(o_.client, rendezvous, PsJobJson(o_));
  if (!e.ok()) return e.status();
  endpoint_ = *std::move(e);
  metrics_ = std::make_unique<pipeline::AgentMetrics>();
  worker_metrics_ = std::make_unique<PsWorkerMetrics>(*metrics_->registry());
  if (const int port = client::MetricsPortOf(o_.client); port >= 0) {
    // One port per local rank (base + LOCAL_RANK): a pod's ranks each serve their own.
    if (absl::Status s = metrics_->Serve(absl::StrCat(o_.client.metrics_address, ":", port));
        !s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat("GRADEX_METRICS_PORT ", o_.client.metrics_port, " + LOCAL_RANK ",
                                 o_.client.local_rank, ": ", s.message()));
    }
  }
  if (endpoint_.server != nullptr) {
    // This process runs the coordinator: it hosts the server shards too.
    server_metrics_ = std::make_unique<ps::PsServerMetrics>(*metrics_->registry());
    HostedServerOptions h;
    h.coordinator = endpoint_.address;
    h.token = endpoint_.token;
    h.job = o_.client.job;
    h.data_ip = o_.client.data_ip;
    h.snapshot_dir = o_.snapshot_dir;
    h.timeout = o_.client.timeout;
    h.metrics = server_metrics_.get();
    absl::StatusOr<std::unique_ptr<HostedServer>> hs = HostedServer::Start(h);
    if (!hs.ok()) return hs.status();
    hosted_ = *std::move(hs);
  }
  const auto rpc = std::min<std::chrono::milliseconds>(o_.client.timeout, std::chrono::seconds(5));
  member::MemberWiringOptions wire;
  wire.control.target = endpoint_.address;
  wire.control.rpc_timeout = rpc;
  wire.control.join_timeout = std::max(o_.client.timeout - rpc, std::chrono::milliseconds(0));
  wire.data_ip = o_.client.data_ip;
  wire.ucx.connect_timeout = o_.client.timeout;
  absl::StatusOr<member::MemberWiring> wired = member::WireMember(std::move(wire));
  if (!wired.ok()) return wired.status();
  control_ = std::move(wired->control);
  transports_ = std::move(wired->transports);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  ps::PsMemberOptions m;
  m.job = o_.client.job;
  m.token = endpoint_.token;
  m.host = host;
  m.local_rank = o_.client.local_rank;
  m.agent_id = absl::StrCat(host, "/", o_.client.local_rank, "/", getpid(), "/ps-worker-r",
                            o_.client.rank, "/", g_workers.fetch_add(1));
  m.device = "cpu";
  m.rpc_timeout = rpc;
  member_ = std::make_unique<ps::PsMember>(m, control_.get(), transports_.get());
  if (absl::Status s = member_->Join(transport::DeadlineIn(o_.client.timeout)); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("gradex PsWorker: joining the coordinator at ",
                                               endpoint_.address, ": ", s.message()));
  }
  follower_ = std::thread([this] { Follow(); });
  return absl::OkStatus();
}

// A new epoch's UCX wire-up needs every member of it, and a worker used to
// enter one only in its next Step: a worker busy between steps (a long
// forward pass, an evaluation) held the servers and every other worker at
// that wire-up. This thread enters each new epoch as soon as the plan names
// it, whenever no Step runs. It touches no parameters: EnterEpoch connects
// and marks the shards to re-join; the hello and full sync, which write the
// parameters, stay in the next Step.
void PsWorkerImpl::Follow() {
  constexpr auto kEvery = std::chrono::milliseconds(20);
  while (!stop_following_.load()) {
    std::this_thread::sleep_for(kEvery);
    if (!step_mu_.TryLock()) continue;  // a Step runs: it enters epochs itself
    std::shared_ptr<const member::Plan> latest = member_->Current();
    const bool due = latest != nullptr && (exchange_ ? member_->Superseded(running_)
                                                     : latest->epoch != failed_between_steps_);
    if (due && !stop_following_.load()) {
      if (EnterEpoch(transport::DeadlineIn(o_.client.timeout)).ok()) {
        ++entered_between_steps_;
      } else {
        failed_between_steps_ = latest->epoch;  // the next Step tries again, and reports
      }
    }
    step_mu_.Unlock();
  }
}

std::string PsWorkerImpl::Servers() const {
  if (plan_ == nullptr) return "";
  std::vector<std::string> who;
  for (uint32_t s = 0; s < plan_->ps->shards && s < 8; ++s) {
    const int r = plan_->ps->shard_rank[s];
    who.push_back(
        absl::StrCat("shard ", s, " on rank ", r, ", server '", plan_->members[r].agent_id, "'"));
  }
  return absl::StrCat(" [parameter servers: ", absl::StrJoin(who, "; "),
                      plan_->ps->shards > 8 ? "; ..." : "", "]");
}

std::string PsWorkerImpl::Where() const {
  return plan_ == nullptr ? std::string("gradex PsWorker")
                          : absl::StrCat("gradex PsWorker (epoch ", plan_->epoch, ", worker ",
                                         state_ ? static_cast<int>(state_->worker()) : -1, ")");
}

absl::Status PsWorkerImpl::EnterEpoch(transport::Deadline deadline) {
  // Leaving a running epoch: wait for another. After a failed entry: the
  // current one will do (its wire-up may succeed this time).
  const uint32_t leaving = exchange_ ? running_ : 0;
  exchange_.reset();
  transport_.reset();
  absl::StatusOr<std::shared_ptr<const member::Plan>> plan = member_->AwaitEpoch(leaving, deadline);
  if (!plan.ok()) return plan.status();
  plan_ = *plan;
  const member::PsPlan& ps = *plan_->ps;
  if (ps.layer_sizes != o_.layer_sizes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the job's model (", ps.layer_sizes.size(), " layers) is not this worker's (",
        o_.layer_sizes.size(), " layers, ", layout_.total(),
        " elements): the same model's "
        "parameters, in the same order, on every worker and in the job config's ps.layer_sizes"));
  }
  absl::StatusOr<std::vector<DgsRange>> ranges = layout_.SplitShards(ps.shards);
  if (!ranges.ok()) return ranges.status();
  const int rank = member_->RankIn(*plan_);
  const int slot = ps.worker_slot[rank];
  if (!state_ || static_cast<int>(state_->worker()) != slot || state_->shard_ranges() != *ranges) {
    DgsWorkerOptions w;
    w.momentum = o_.momentum;
    w.weight_decay = o_.weight_decay;
    w.density = o_.density;
    w.lr0 = o_.lr0;
    absl::StatusOr<DgsWorkerState> s =
        DgsWorkerState::Create(layout_, static_cast<uint32_t>(slot), *ranges, w);
    if (!s.ok()) return s.status();
    state_.emplace(*std::move(s));
    versions_.assign(ps.shards, 0);
  }
  // Every shard is joined afresh in a new epoch (hello, full sync).
  for (uint32_t s = 0; s < ps.shards; ++s) state_->Leave(s);
  absl::StatusOr<std::unique_ptr<transport::Transport>> t = member_->Connect(*plan_, deadline);
  if (!t.ok()) return t.status();
  transport_ = *std::move(t);
  running_ = plan_->epoch;
  member_->SetRunning(running_);
  std::vector<DgsShardPeer> peers;
  for (uint32_t s = 0; s < ps.shards; ++s) peers.push_back({s, ps.shard_rank[s]});
  exchange_.emplace(*transport_, DgsJob{ps::PsJobId(o_.client.job), plan_->epoch},
                    std::move(peers));
  absl::MutexLock lock(&mu_);
  stats_.epoch = plan_->epoch;
  stats_.worker = slot;
  ++stats_.epochs_entered;
  return absl::OkStatus();
}

absl::Status PsWorkerImpl::Step(std::span<const float> grad, std::span<float> params, float lr) {
  absl::MutexLock step_lock(&step_mu_);
  if (closed_) return absl::FailedPreconditionError("gradex PsWorker is closed");
  if (grad.size() != layout_.total() || params.size() != layout_.total()) {
    return absl::InvalidArgumentError(absl::StrCat("gradex PsWorker: grad has ", grad.size(),
                                                   " and params ", params.size(),
                                                   " elements; the model has ", layout_.total()));
  }
  if (!(lr > 0) || std::isinf(lr)) {
    return absl::InvalidArgumentError("gradex PsWorker: lr must be finite and > 0");
  }
  const transport::Clock::time_point start = transport::Clock::now();
  const transport::Deadline deadline = start + o_.client.timeout;
  absl::Status st = absl::OkStatus();
  PsStepRecord rec;
  rec.epochs_entered = entered_between_steps_;
  entered_between_steps_ = 0;
  if (!exchange_ || member_->Superseded(running_)) {
    st = EnterEpoch(deadline);
    rec.epochs_entered += st.ok() ? 1 : 0;
    if (!st.ok()) rec.failure = PsFailure::kEpoch;
  }
  DgsStepStats step;
  if (st.ok()) {
    st = exchange_->Step(*state_, grad, params, lr, deadline, &step);
    if (!st.ok()) rec.failure = ClassifyExchangeError(st);
  }
  rec.ok = st.ok();
  rec.seconds = std::chrono::duration<double>(transport::Clock::now() - start).count();
  rec.sent_bytes = step.sent_bytes;
  rec.recv_bytes = step.recv_bytes;
  rec.pushed_entries = step.pushed_entries;
  rec.pulled_entries = step.pulled_entries;
  rec.full_syncs = step.full_syncs;
  rec.max_staleness = plan_ != nullptr && plan_->ps ? plan_->ps->max_staleness : 0;
  if (st.ok()) {
    for (uint32_t s = 0; s < versions_.size(); ++s) {
      const uint64_t v = state_->version(s);
      // This push was applied on top of v_prev and answered at v: the others
      // pushed v - v_prev - 1 versions in between (a full sync resets it).
      if (versions_[s] != 0 && v > versions_[s]) {
        rec.staleness = std::max(rec.staleness, v - versions_[s] - 1);
      }
      versions_[s] = v;
      rec.version += v;
    }
  }
  {
    absl::MutexLock lock(&mu_);
    stats_.sent_bytes += step.sent_bytes;
    stats_.recv_bytes += step.recv_bytes;
    stats_.last_sent_bytes = step.sent_bytes;
    stats_.last_recv_bytes = step.recv_bytes;
    stats_.pushed_entries += step.pushed_entries;
    stats_.pulled_entries += step.pulled_entries;
    stats_.full_syncs += step.full_syncs;
    stats_.version_gaps += step.version_gaps;
    stats_.versions_lost += step.versions_lost;
    rec.epoch = stats_.epoch;
    if (!st.ok()) {
      ++stats_.failed_steps;
    } else {
      ++stats_.steps;
      stats_.version = rec.version;
      stats_.staleness = rec.staleness;
      stats_.max_staleness_seen = std::max(stats_.max_staleness_seen, rec.staleness);
    }
  }
  // Outside mu_: Stats() never waits for the metrics (nor they for it).
  worker_metrics_->Record(rec);
  if (!st.ok()) {
    return absl::Status(st.code(), absl::StrCat(Where(), " step: ", st.message(), Servers()));
  }
  return absl::OkStatus();
}

absl::Status PsWorkerImpl::Close() {
  stop_following_.store(true);
  if (follower_.joinable()) follower_.join();
  absl::MutexLock step_lock(&step_mu_);
  if (closed_) return absl::OkStatus();
  closed_ = true;
  // A finished worker stops counting for the others' staleness bound.
  if (exchange_ && state_)
    (void)exchange_->Leave(*state_, transport::DeadlineIn(std::chrono::seconds(1)));
  exchange_.reset();
  transport_.reset();
  absl::Status st = absl::OkStatus();
  if (member_) {
    st = member_->Leave(transport::DeadlineIn(
        std::min<std::chrono::milliseconds>(o_.client.timeout, std::chrono::seconds(5))));
  }
  if (endpoint_.server != nullptr) {
    // The others leave first (bounded): the server keeps serving them.
    const transport::Deadline until = transport::DeadlineIn(
        std::min<std::chrono::milliseconds>(o_.client.timeout, std::chrono::seconds(5)));
    while (endpoint_.server->coordinator().members() > 1 && transport::Clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  if (hosted_) {
    if (absl::Status s = hosted_->Stop(); !s.ok() && st.ok()) st = s;
    hosted_.reset();
  }
  if (endpoint_.server != nullptr) endpoint_.server->Shutdown();
  endpoint_.server.reset();
  return st;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PsWorker>> PsWorker::Create(PsWorkerOptions options,
                                                           client::Rendezvous rendezvous) {
  if (absl::Status s = CheckPsWorkerOptions(options); !s.ok()) return s;
  auto w = std::make_unique<PsWorkerImpl>(std::move(options));
  if (absl::Status s = w->Start(rendezvous); !s.ok()) return s;
  return w;
}

}  // namespace gradex::ps
