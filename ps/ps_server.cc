#include "ps/ps_server.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <thread>

#include "absl/strings/str_cat.h"

namespace gradex::ps {
namespace {

constexpr auto kRefreshEvery = std::chrono::milliseconds(250);
constexpr auto kDrain = std::chrono::milliseconds(100);

absl::StatusOr<std::vector<uint8_t>> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(path);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// A unique temporary name (mkstemp): servers sharing one volume may write the
// same shard's snapshot during a hand-off, and a shared "path.tmp" would let
// one rename the other's half-written file.
absl::Status WriteAtomically(const std::string& path, const transport::Bytes& bytes) {
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = mkstemp(tmp.data());
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot write ", tmp));
  std::FILE* f = fdopen(fd, "wb");
  if (f == nullptr) {
    close(fd);
    std::remove(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("cannot write ", tmp));
  }
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size() &&
                  std::fflush(f) == 0 && fsync(fileno(f)) == 0;
  if (std::fclose(f) != 0 || !ok) {
    std::remove(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("writing ", tmp, " failed"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

}  // namespace

PsServer::PsServer(PsMember* member, PsServerOptions options, PsServerMetrics* metrics)
    : member_(member), options_(std::move(options)), metrics_(metrics) {}

void PsServer::Log(const std::string& line) const {
  if (options_.log) options_.log(line);
}

std::string PsServer::SnapshotPath(uint32_t shard, uint32_t shards) const {
  return absl::StrCat(options_.snapshot_dir, "/shard-", shard, "-of-", shards, ".dgss");
}

absl::Status PsServer::TakeShard(const member::Plan& plan, uint32_t shard, DgsRange range,
                                 const DgsLayout& layout) {
  DgsServerOptions o;
  o.workers = plan.ps->worker_slots;
  auto every = plan.params.find("full_sync_every");
  if (every != plan.params.end() && every->second >= 1 && every->second <= 1e9) {
    o.full_sync_every = static_cast<uint32_t>(every->second);
  }
  // The staircase needs max_staleness >= workers - 1 (ps/dgs_server_shard.h);
  // the job config refuses less, and the plan is bounded again here.
  o.max_staleness = plan.ps->max_staleness == 0
                        ? kDgsUnboundedStaleness
                        : std::max<uint64_t>(plan.ps->max_staleness, o.workers - 1);
  absl::StatusOr<DgsServerShard> s = DgsServerShard::Create(layout, shard, range, o);
  if (!s.ok()) return s.status();
  auto held = std::make_unique<DgsServerShard>(*std::move(s));
  if (!options_.snapshot_dir.empty()) {
    const std::string path = SnapshotPath(shard, plan.ps->shards);
    absl::StatusOr<std::vector<uint8_t>> bytes = ReadFile(path);
    if (bytes.ok()) {
      if (absl::Status st = held->Restore(*bytes); !st.ok()) {
        return absl::DataLossError(absl::StrCat("snapshot ", path, " does not restore: ",
                                                st.message(), " (move it away to start afresh)"));
      }
      Log(absl::StrCat("shard ", shard, ": restored version ", held->version(), " from ", path));
    }
  }
  Log(absl::StrCat("shard ", shard, " of ", plan.ps->shards, ": elements [", range.begin, ", ",
                   range.end, ")"));
  shards_[shard] = std::move(held);
  return absl::OkStatus();
}

absl::Status PsServer::Enter(std::shared_ptr<const member::Plan> plan) {
  servers_.clear();
  gaps_seen_.clear();  // a new epoch's exchanges count from 0
  transport_.reset();
  plan_ = nullptr;
  absl::StatusOr<DgsLayout> layout = DgsLayout::Create(plan->ps->layer_sizes);
  if (!layout.ok()) return layout.status();
  absl::StatusOr<std::vector<DgsRange>> ranges = layout->SplitShards(plan->ps->shards);
  if (!ranges.ok()) return ranges.status();
  const int rank = member_->RankIn(*plan);
  for (uint32_t s = 0; s < plan->ps->shards; ++s) {
    auto held = shards_.find(s);
    const bool mine = plan->ps->shard_rank[s] == rank;
    if (held != shards_.end() && (!mine || held->second->range() != (*ranges)[s] ||
                                  held->second->layout().fingerprint() != layout->fingerprint())) {
      // Given to another server (or cut otherwise): its last state goes to disk.
      if (!options_.snapshot_dir.empty() && held->second->has_model()) {
        absl::StatusOr<transport::Bytes> snap = held->second->Snapshot();
        absl::Status st =
            snap.ok() ? WriteAtomically(SnapshotPath(s, plan->ps->shards), *snap) : snap.status();
        if (!st.ok()) NoteSnapshotFailure(s, st);
      }
      shards_.erase(held);
      held = shards_.end();
    }
    if (mine && held == shards_.end()) {
      if (absl::Status st = TakeShard(*plan, s, (*ranges)[s], *layout); !st.ok()) return st;
    }
  }
  // Workers wire up at their next step: the epoch's entry bound (else 30 s).
  const auto entry =
      plan->entry_timeout.count() > 0 ? plan->entry_timeout : std::chrono::milliseconds(30000);
  absl::StatusOr<std::unique_ptr<transport::Transport>> t =
      member_->Connect(*plan, transport::DeadlineIn(entry));
  if (!t.ok()) return t.status();
  transport_ = *std::move(t);
  std::vector<int> worker_ranks(plan->ps->worker_slots, -1);
  for (int r = 0; r < plan->world(); ++r) {
    if (plan->ps->worker_slot[r] >= 0) worker_ranks[plan->ps->worker_slot[r]] = r;
  }
  const DgsJob job{PsJobId(member_->options().job), plan->epoch};
  for (auto& [id, shard] : shards_) {
    // Every worker rejoins in a new epoch (hello, full sync): replies lost
    // with the old communicator cannot leave a worker's v_k wrong.
    for (uint32_t k = 0; k < shard->options().workers; ++k) shard->Deactivate(k);
    servers_.push_back(std::make_unique<DgsServer>(*transport_, job, *shard, worker_ranks));
  }
  plan_ = std::move(plan);
  member_->SetRunning(plan_->epoch);
  Log(absl::StrCat("epoch ", plan_->epoch, ": rank ", rank, " of ", plan_->world(), ", serving ",
                   shards_.size(), " of ", plan_->ps->shards, " shards"));
  return absl::OkStatus();
}

absl::Status PsServer::SnapshotNow() {
  if (options_.snapshot_dir.empty() || plan_ == nullptr) return absl::OkStatus();
  absl::Status first = absl::OkStatus();
  for (const auto& [id, shard] : shards_) {
    if (!shard->has_model()) continue;
    absl::StatusOr<transport::Bytes> snap = shard->Snapshot();
    absl::Status st =
        snap.ok() ? WriteAtomically(SnapshotPath(id, plan_->ps->shards), *snap) : snap.status();
    if (!st.ok()) {
      NoteSnapshotFailure(id, st);
      if (first.ok()) first = st;
    }
  }
  if (!first.ok()) return first;
  ++snapshots_;
  snapshot_failing_ = false;
  return absl::OkStatus();
}

void PsServer::NoteSnapshotFailure(uint32_t shard, const absl::Status& why) {
  ++snapshot_failures_;
  snapshot_failing_ = true;
  Log(absl::StrCat("shard ", shard, ": snapshot failed: ", why.message()));
  if (metrics_) {
    metrics_->SnapshotFailed();
    metrics_->SnapshotHealth(false);
  }
}

void PsServer::Publish(const std::string& error) {
  PsServerStatus s;
  s.epoch = plan_ ? plan_->epoch : 0;
  for (size_t i = 0; i < servers_.size(); ++i) {
    const DgsServerShard& shard = servers_[i]->shard();
    const DgsServerStats& ex = servers_[i]->stats();
    uint64_t& seen = gaps_seen_[shard.shard()];
    if (ex.version_gaps > seen) {
      // A worker was further than this shard: it was restored from an older
      // snapshot. The worker's full sync already took the shard's M.
      version_gaps_ += ex.version_gaps - seen;
      Log(absl::StrCat("shard ", shard.shard(), ": worker ", ex.last_gap_worker, " had version ",
                       ex.last_gap_worker_version, ", the shard is at ",
                       ex.last_gap_worker_version - ex.last_gap, ": ", ex.last_gap,
                       " versions lost (restored from an older snapshot); it takes a full sync (",
                       ex.version_gaps - seen, " such hellos since the last report)"));
      seen = ex.version_gaps;
    }
    PsServerStatus::Shard out;
    out.shard = shard.shard();
    out.version = shard.version();
    out.stats = shard.stats();
    out.refused = shard.total_refused();
    for (uint32_t k = 0; k < shard.options().workers; ++k) out.active_workers += shard.active(k);
    s.shards.push_back(out);
    if (metrics_) metrics_->Refresh(shard, servers_[i]->stats(), s.epoch);
  }
  s.snapshots = snapshots_;
  s.snapshots_healthy = !snapshot_failing_;
  s.snapshot_failures = snapshot_failures_;
  s.version_gaps = version_gaps_;
  if (metrics_) metrics_->SnapshotHealth(!snapshot_failing_);
  absl::MutexLock lock(&mu_);
  s.last_error = error.empty() ? status_.last_error : error;
  status_ = std::move(s);
}

PsServerStatus PsServer::Status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

absl::Status PsServer::Run(const std::function<bool()>& stop) {
  absl::StatusOr<std::shared_ptr<const member::Plan>> first =
      member_->AwaitEpoch(0, transport::DeadlineIn(options_.join_timeout));
  if (!first.ok()) return first.status();
  std::shared_ptr<const member::Plan> want = *first;
  auto idle = std::chrono::microseconds(20);
  transport::Clock::time_point refresh_at = transport::Clock::now();
  transport::Clock::time_point snapshot_at = transport::Clock::time_point::max();
  while (!stop()) {
    if (std::shared_ptr<const member::Plan> cur = member_->Current();
        cur != nullptr && (plan_ == nullptr || cur->epoch != plan_->epoch) && cur != want) {
      want = cur;
      // Workers move at their next step: answer the pushes already in
      // flight on the old communicator first, so their steps do not time out.
      const transport::Clock::time_point drain_until = transport::Clock::now() + kDrain;
      while (plan_ != nullptr && transport::Clock::now() < drain_until) {
        for (auto& server : servers_) (void)server->Poll();
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
    if (want != nullptr && (plan_ == nullptr || want->epoch != plan_->epoch)) {
      if (absl::Status st = Enter(want); !st.ok()) {
        if (st.code() == absl::StatusCode::kDataLoss) return st;
        Log(absl::StrCat("epoch ", want->epoch, ": ", st.message()));
        Publish(std::string(st.message()));
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      const auto interval = plan_->ps->snapshot_interval;
      snapshot_at = interval.count() > 0 && !options_.snapshot_dir.empty()
                        ? transport::Clock::now() + interval
                        : transport::Clock::time_point::max();
    }
    bool handled = false;
    for (auto& server : servers_) {
      absl::StatusOr<bool> h = server->Poll();  // an error: every worker of it is gone
      handled = handled || (h.ok() && *h);
    }
    const transport::Clock::time_point now = transport::Clock::now();
    if (now >= snapshot_at) {
      absl::Status st = SnapshotNow();
      Publish(st.ok() ? "" : std::string(st.message()));
      snapshot_at = now + plan_->ps->snapshot_interval;
    }
    if (now >= refresh_at) {
      Publish("");
      refresh_at = now + kRefreshEvery;
    }
    if (handled) {
      idle = std::chrono::microseconds(20);
    } else {
      // The transport has no wait-for-any: back off to 1 ms so an idle
      // server does not take a core its workers need.
      std::this_thread::sleep_for(idle);
      idle = std::min(idle * 2, std::chrono::microseconds(1000));
    }
  }
  absl::Status st = SnapshotNow();
  Publish(st.ok() ? "" : std::string(st.message()));
  servers_.clear();
  transport_.reset();
  return st;
}

}  // namespace gradex::ps
