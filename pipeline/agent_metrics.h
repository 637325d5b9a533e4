// The agent's Prometheus metrics (docs/metrics.md, "Agent"). One registry per
// agent, so several agents in one process (tests) keep theirs apart; served
// over HTTP when a port is given.
#ifndef GRADEX_PIPELINE_AGENT_METRICS_H_
#define GRADEX_PIPELINE_AGENT_METRICS_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "collectives/sparse_allreduce.h"
#include "collectives/wire/frame.h"
#include "metrics/metrics_exposer.h"

namespace prometheus {
class Registry;
class Exposer;
class Counter;
class Gauge;
template <typename T>
class Family;
class Histogram;
}  // namespace prometheus

namespace gradex::pipeline {

class AgentMetrics {
 public:
  AgentMetrics();
  ~AgentMetrics();

  // Serves /metrics on `bind` (e.g. "127.0.0.1:9400"); an error if it cannot bind.
  absl::Status Serve(const std::string& bind);
  // The port Serve bound (its port 0 picks one), -1 before Serve.
  int port() const;
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // One successful call (one bucket of one step).
  void ObserveCall(const std::string& algorithm, const collectives::CallStats& stats, size_t n,
                   double residual_l2, const collectives::AllreduceResult& result,
                   int team_position);
  void StepOk();
  void StepFailed();
  void Membership(uint32_t epoch, int members, int rank);
  void EpochChange();
  // This rank's own per-bucket rule `field` differs from the agreed one
  // (epoch_sync.h): counted once per warning.
  void RulesDisagreement(const std::string& field);
  // Exports the process-wide frame validation counters and the control
  // plane's report drops (both cumulative) as counters.
  void SyncCounters(uint64_t report_drops);

 private:
  // The hierarchical exchange's stage details of one successful call.
  void ObserveStages(const collectives::CallStats& stats);

  std::shared_ptr<prometheus::Registry> registry_;
  metrics::MetricsExposer exposer_;
  prometheus::Family<prometheus::Histogram>* call_seconds_;
  prometheus::Counter *sent_bytes_, *recv_bytes_, *steps_ok_, *steps_failed_, *epoch_changes_,
      *report_drops_, *residual_nonfinite_, *reuse_hits_, *reuse_misses_;
  prometheus::Gauge *result_nnz_, *result_density_, *residual_l2_, *threshold_, *epoch_, *members_,
      *rank_;
  prometheus::Family<prometheus::Gauge>* details_;
  prometheus::Family<prometheus::Counter>* rules_disagreements_;
  // The hierarchical exchange's two stages (intra_node, inter_node): seconds
  // and bytes sent / received. Flat calls feed none of them.
  struct Stage {
    prometheus::Counter *seconds, *sent, *received;
  };
  Stage intra_node_{}, inter_node_{};
  prometheus::Gauge *hierarchy_nodes_, *hierarchy_ranks_per_node_;
  std::array<prometheus::Counter*, static_cast<int>(collectives::wire::FrameError::kCount)>
      frame_errors_{};
  std::array<uint64_t, static_cast<int>(collectives::wire::FrameError::kCount)> frame_seen_{};
  uint64_t drops_seen_ = 0;
};

}  // namespace gradex::pipeline

#endif  // GRADEX_PIPELINE_AGENT_METRICS_H_
