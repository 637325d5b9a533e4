// The server role's Prometheus metrics (docs/metrics.md, "Parameter
// server"): pushes, pulls, full syncs, bytes each way, refusals by reason,
// each shard's version, and a histogram of the workers' staleness (versions
// behind), sampled per active worker at every refresh.
#ifndef GRADEX_PS_PS_SERVER_METRICS_H_
#define GRADEX_PS_PS_SERVER_METRICS_H_

#include <cstdint>
#include <map>
#include <vector>

#include "ps/dgs_exchange.h"
#include "ps/dgs_server_shard.h"

namespace prometheus {
class Registry;
class Counter;
class Gauge;
class Histogram;
template <typename T>
class Family;
}  // namespace prometheus

namespace gradex::ps {

class PsServerMetrics {
 public:
  explicit PsServerMetrics(prometheus::Registry& registry);

  // Cumulative counters of one shard's state and of its exchange on the
  // current epoch's communicator (`exchange` restarts with each epoch).
  void Refresh(const DgsServerShard& shard, const DgsServerStats& exchange, uint32_t epoch);
  // A shard's snapshot that could not be written (or was refused: a
  // non-finite model), and whether the latest round of snapshots all
  // succeeded (the snapshot health gauge: 1 healthy, 0 failing).
  void SnapshotFailed();
  void SnapshotHealth(bool healthy);

 private:
  struct Seen {
    DgsShardStats shard;
    DgsRefusalCounts refused{};
    DgsServerStats exchange;
    uint32_t epoch = 0;
  };
  prometheus::Counter *pushes_, *pulls_, *full_syncs_, *joins_, *bytes_in_, *bytes_out_, *held_,
      *workers_lost_, *version_gaps_, *snapshot_failures_;
  prometheus::Gauge* snapshot_healthy_;
  prometheus::Family<prometheus::Counter>* refused_;
  prometheus::Family<prometheus::Gauge>* version_;
  prometheus::Family<prometheus::Gauge>* active_;
  prometheus::Histogram* staleness_;
  std::map<uint32_t, Seen> seen_;  // by shard
};

}  // namespace gradex::ps

#endif  // GRADEX_PS_PS_SERVER_METRICS_H_
