#include "ps/ps_server_metrics.h"

#include <string>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace gradex::ps {
namespace {

prometheus::Counter& Counter(prometheus::Registry& r, const char* name, const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r).Add({});
}

void Add(prometheus::Counter* c, uint64_t now, uint64_t before) {
  if (now > before) c->Increment(static_cast<double>(now - before));
}

}  // namespace

PsServerMetrics::PsServerMetrics(prometheus::Registry& r)
    : pushes_(&Counter(r, "gradex_ps_server_pushes_total", "Worker pushes applied into M")),
      pulls_(&Counter(r, "gradex_ps_server_pulls_total", "Sparse pulls (G_k top R%) sent")),
      full_syncs_(&Counter(r, "gradex_ps_server_full_syncs_total",
                           "Full model syncs sent (joins and every full_sync_every versions)")),
      joins_(&Counter(r, "gradex_ps_server_joins_total", "Worker hellos (joins, rejoins)")),
      bytes_in_(&Counter(r, "gradex_ps_server_received_bytes_total",
                         "Bytes of worker messages received (pushes, hellos)")),
      bytes_out_(&Counter(r, "gradex_ps_server_sent_bytes_total",
                          "Bytes of replies sent (pulls, full syncs, refusals)")),
      held_(&Counter(r, "gradex_ps_server_held_pushes_total",
                     "Pushes held because their worker was max_staleness ahead")),
      workers_lost_(&Counter(r, "gradex_ps_server_workers_lost_total",
                             "Workers whose messages failed (dead peers); the others go on")),
      version_gaps_(&Counter(r, "gradex_ps_server_version_gaps_total",
                             "Worker hellos naming a later version of the shard than the shard "
                             "has (it was restored from an older snapshot); each takes a full "
                             "sync")),
      snapshot_failures_(&Counter(r, "gradex_ps_server_snapshot_failures_total",
                                  "Shard snapshots not written (a full or read-only directory, "
                                  "or a non-finite model)")),
      snapshot_healthy_(&prometheus::BuildGauge()
                             .Name("gradex_ps_server_snapshot_healthy")
                             .Help("1 when the latest snapshot of every held shard was "
                                   "written, 0 while snapshots fail")
                             .Register(r)
                             .Add({})),
      refused_(&prometheus::BuildCounter()
                    .Name("gradex_ps_server_refused_total")
                    .Help("Worker messages refused and never applied, by reason")
                    .Register(r)),
      version_(&prometheus::BuildGauge()
                    .Name("gradex_ps_server_version")
                    .Help("Model version of each shard held (pushes applied)")
                    .Register(r)),
      active_(&prometheus::BuildGauge()
                   .Name("gradex_ps_server_active_workers")
                   .Help("Workers joined to each shard held")
                   .Register(r)),
      staleness_(&prometheus::BuildHistogram()
                      .Name("gradex_ps_server_staleness_versions")
                      .Help("Versions each active worker is behind its shard, sampled at every "
                            "refresh (about 4 per second)")
                      .Register(r)
                      .Add({}, prometheus::Histogram::BucketBoundaries{0, 1, 2, 4, 8, 16, 32, 64,
                                                                       128, 256, 1024})) {
  for (size_t i = 1; i < static_cast<size_t>(DgsRefusal::kCount); ++i) {
    refused_->Add({{"reason", std::string(DgsRefusalName(static_cast<DgsRefusal>(i)))}});
  }
  snapshot_healthy_->Set(1);
}

void PsServerMetrics::SnapshotFailed() { snapshot_failures_->Increment(); }

void PsServerMetrics::SnapshotHealth(bool healthy) { snapshot_healthy_->Set(healthy ? 1 : 0); }

void PsServerMetrics::Refresh(const DgsServerShard& shard, const DgsServerStats& exchange,
                              uint32_t epoch) {
  Seen& s = seen_[shard.shard()];
  const DgsShardStats& now = shard.stats();
  Add(pushes_, now.pushes, s.shard.pushes);
  Add(pulls_, now.pulls, s.shard.pulls);
  Add(full_syncs_, now.full_syncs, s.shard.full_syncs);
  Add(joins_, now.joins, s.shard.joins);
  if (s.epoch != epoch) s.exchange = DgsServerStats{};  // a new communicator's counters
  Add(bytes_in_, exchange.bytes_in, s.exchange.bytes_in);
  Add(bytes_out_, exchange.bytes_out, s.exchange.bytes_out);
  Add(held_, exchange.held, s.exchange.held);
  Add(workers_lost_, exchange.workers_lost, s.exchange.workers_lost);
  Add(version_gaps_, exchange.version_gaps, s.exchange.version_gaps);
  for (size_t i = 1; i < static_cast<size_t>(DgsRefusal::kCount); ++i) {
    Add(&refused_->Add({{"reason", std::string(DgsRefusalName(static_cast<DgsRefusal>(i)))}}),
        shard.refused()[i], s.refused[i]);
  }
  const std::string id = std::to_string(shard.shard());
  version_->Add({{"shard", id}}).Set(static_cast<double>(shard.version()));
  int active = 0;
  for (uint32_t k = 0; k < shard.options().workers; ++k) {
    if (!shard.active(k)) continue;
    ++active;
    staleness_->Observe(static_cast<double>(shard.staleness(k)));
  }
  active_->Add({{"shard", id}}).Set(active);
  s.shard = now;
  s.refused = shard.refused();
  s.exchange = exchange;
  s.epoch = epoch;
}

}  // namespace gradex::ps
