// gradex::ps::PsWorker: a trainer's worker in an asynchronous parameter-server
// job (DGS; docs/architecture.md "DGS"). Each Step pushes the top
// R% per layer of the worker's SAMomentum accumulator to the server shards
// and applies the sparse model difference they return (density 1: plain
// ASGD, dense both ways), with no barrier between workers.
//
// Where the servers come from: a coordinator given by address (the job's
// config names the model's layer sizes and its `ps` settings, servers run
// as `gradex-agent --role server`), or, on rank 0 with none given, a
// coordinator embedded in rank 0's process with the server hosted there too
// (one thread and its own UCX worker), so a single torchrun job needs
// nothing else. Why rank 0: torchrun starts one kind of process; a launcher
// that also starts `gradex-agent --role server` would have to outlive and
// watch the trainers, which rank 0's process already does for the
// coordinator.
#ifndef GRADEX_PS_PS_WORKER_H_
#define GRADEX_PS_PS_WORKER_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/client/client.h"

namespace gradex::ps {

struct PsWorkerOptions {
  // job, rank, world_size (the workers), local_rank, coordinator, token,
  // advertise_host, data_ip, metrics_port and timeout (joining, and every
  // Step) as for Client; the collective options there are unused.
  client::ClientOptions client;
  std::vector<uint32_t> layer_sizes;  // the model's layers in parameter order
  float density = 0.01f;              // (0, 1]; 1 = ASGD
  float momentum = 0.9f;              // (0, 1]
  float weight_decay = 5e-4f;         // >= 0
  float lr0 = 0;                      // R = density·lr/lr0; 0: the first step's lr
  // The embedded coordinator's job (rank 0 with none given): a worker more
  // than this many versions behind waits (0 = unbounded; else >= workers - 1),
  // the server shards (0 = one per host), and the hosted server's snapshots
  // ("" = none) every snapshot_interval.
  uint64_t max_staleness = 0;
  uint32_t server_shards = 0;
  std::string snapshot_dir;
  std::chrono::milliseconds snapshot_interval{30000};
};

struct PsWorkerStats {
  uint32_t epoch = 0;         // the communicator's epoch (0: none yet)
  int worker = -1;            // this worker's id at the servers (its slot)
  uint64_t steps = 0;         // Steps that succeeded
  uint64_t failed_steps = 0;  // Steps that returned an error
  uint64_t version = 0;       // sum over shards of the last version applied
  // Versions other workers pushed between this worker's last two pulls,
  // the most over shards: how far behind its last push was applied.
  uint64_t staleness = 0;
  uint64_t max_staleness_seen = 0;
  uint64_t sent_bytes = 0, recv_bytes = 0;  // every Step, both ways
  uint64_t last_sent_bytes = 0, last_recv_bytes = 0;
  uint64_t pushed_entries = 0, pulled_entries = 0;
  uint64_t full_syncs = 0;  // full syncs applied (joins, rejoins, every 150 versions)
  // Full syncs at a version below this worker's last from that shard (the
  // server restored an older snapshot), and the versions they went back.
  uint64_t version_gaps = 0, versions_lost = 0;
  uint64_t epochs_entered = 0;
};

class PsWorker {
 public:
  // Joins (or starts and joins) the coordinator within the timeout.
  static absl::StatusOr<std::unique_ptr<PsWorker>> Create(PsWorkerOptions options,
                                                          client::Rendezvous rendezvous = {});
  virtual ~PsWorker() = default;

  // One DGS step: grad and params have the layout's total elements; params
  // are updated in place by what the servers return. Bounded by the
  // timeout; a server that is gone fails it with an error naming it (the
  // next Step rejoins, and re-syncs the full model). On failure params hold
  // whatever replies arrived (a shard's full sync re-aligns them later).
  virtual absl::Status Step(std::span<const float> grad, std::span<float> params, float lr) = 0;
  virtual PsWorkerStats Stats() const = 0;
  // Leaves the job (rank 0 with the embedded coordinator and server: waits
  // up to 5 s for the others to leave, writes a last snapshot, stops them).
  // Idempotent.
  virtual absl::Status Close() = 0;
  // The port /metrics is served on (GRADEX_METRICS_PORT, bound to
  // GRADEX_METRICS_ADDR; 0 there picks a free one), -1 when not served.
  // docs/metrics.md lists what it exports (gradex_ps_worker_, and rank 0's
  // hosted server's gradex_ps_server_).
  virtual int metrics_port() const = 0;
};

}  // namespace gradex::ps

#endif  // GRADEX_PS_PS_WORKER_H_
