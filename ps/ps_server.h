// The server role of a parameter-server job (DGS): `gradex-agent
// --role server`, or a trainer's rank 0 hosting it in-process (client
// PsWorker). One thread runs Run(): for each epoch that lists this member it
// connects the epoch's communicator, keeps a DgsServerShard per shard the
// plan gives it (M and its version live across epochs; every worker rejoins
// each epoch and takes a full sync) and polls a DgsServer per shard, with no
// barrier between workers. It snapshots every held shard to
// `snapshot_dir` every plan.ps.snapshot_interval and restores a shard from
// there when it first takes it, so a restarted server continues the model.
#ifndef GRADEX_PS_PS_SERVER_H_
#define GRADEX_PS_PS_SERVER_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "ps/dgs_exchange.h"
#include "ps/dgs_server_shard.h"
#include "ps/ps_member.h"
#include "ps/ps_server_metrics.h"

namespace gradex::ps {

struct PsServerOptions {
  // Where shard snapshots live ("" = none): shard-S-of-N.dgss per shard,
  // written to a temporary file and renamed, so a crash never leaves half.
  std::string snapshot_dir;
  // How long Run waits for the first epoch that lists it with shards.
  std::chrono::milliseconds join_timeout{120000};
  // Told about each epoch entered, shard taken and snapshot (may be empty).
  std::function<void(const std::string&)> log;
};

// A thread-safe view of what the server holds and did.
struct PsServerStatus {
  uint32_t epoch = 0;
  struct Shard {
    uint32_t shard = 0;
    uint64_t version = 0;
    DgsShardStats stats;
    uint64_t refused = 0;
    int active_workers = 0;
  };
  std::vector<Shard> shards;
  uint64_t snapshots = 0;
  // Snapshot health: false from a failed snapshot until one round of every
  // held shard's snapshots is written again; failures counted.
  bool snapshots_healthy = true;
  uint64_t snapshot_failures = 0;
  // Worker hellos that named a later version than their shard had (a shard
  // restored from an older snapshot), over the server's life.
  uint64_t version_gaps = 0;
  std::string last_error;  // the latest connect or snapshot failure
};

class PsServer {
 public:
  // `member` must be joined as a server; `metrics` may be null.
  PsServer(PsMember* member, PsServerOptions options, PsServerMetrics* metrics);

  // Serves until `stop` (polled at least every 50 ms) says so, then writes a
  // last snapshot. Errors: no epoch within join_timeout, or a snapshot that
  // does not restore (DATA_LOSS naming the file: never silently discarded).
  absl::Status Run(const std::function<bool()>& stop);

  PsServerStatus Status() const;
  // Writes every held shard's snapshot now (the Run thread only).
  absl::Status SnapshotNow();

 private:
  absl::Status Enter(std::shared_ptr<const member::Plan> plan);
  absl::Status TakeShard(const member::Plan& plan, uint32_t shard, DgsRange range,
                         const DgsLayout& layout);
  void Publish(const std::string& error);
  // Counts, logs and exports a snapshot of `shard` that was not written.
  void NoteSnapshotFailure(uint32_t shard, const absl::Status& why);
  std::string SnapshotPath(uint32_t shard, uint32_t shards) const;
  void Log(const std::string& line) const;

  PsMember* member_;
  PsServerOptions options_;
  PsServerMetrics* metrics_;
  std::shared_ptr<const member::Plan> plan_;
  std::unique_ptr<transport::Transport> transport_;
  std::map<uint32_t, std::unique_ptr<DgsServerShard>> shards_;  // held, by shard
  std::vector<std::unique_ptr<DgsServer>> servers_;             // this epoch's
  uint64_t snapshots_ = 0;
  uint64_t snapshot_failures_ = 0;
  bool snapshot_failing_ = false;
  uint64_t version_gaps_ = 0;               // over the server's life
  std::map<uint32_t, uint64_t> gaps_seen_;  // per shard: this epoch's exchange's count

  mutable absl::Mutex mu_;
  PsServerStatus status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gradex::ps

#endif  // GRADEX_PS_PS_SERVER_H_
