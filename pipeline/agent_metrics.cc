#include "pipeline/agent_metrics.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/algorithms/hierarchical.h"
#include "metrics/metrics_exposer.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "version/build_info_metric.h"

namespace gradex::pipeline {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

prometheus::Counter* NewCounter(prometheus::Registry& r, const std::string& name,
                                const std::string& help) {
  return &BuildCounter().Name(name).Help(help).Register(r).Add({});
}

prometheus::Gauge* NewGauge(prometheus::Registry& r, const std::string& name,
                            const std::string& help) {
  return &BuildGauge().Name(name).Help(help).Register(r).Add({});
}

// 100 us .. ~105 s, doubling: steps range from a tiny bucket on shared memory
// to a large one over a slow network.
prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  prometheus::Histogram::BucketBoundaries b;
  for (double v = 1e-4; v < 120; v *= 2) b.push_back(v);
  return b;
}

}  // namespace

AgentMetrics::AgentMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  prometheus::Registry& r = *registry_;
  // The agent's registry is also the client's and the PsWorker's, so this
  // one series names the build of agents and trainers alike.
  version::RegisterBuildInfo(r);
  call_seconds_ = &BuildHistogram()
                       .Name("gradex_agent_call_duration_seconds")
                       .Help(
                           "Wall time of one collective call (one bucket of one step), by "
                           "algorithm and phase (total, selection, communication, reduction)")
                       .Register(r);
  sent_bytes_ = NewCounter(r, "gradex_agent_sent_bytes_total",
                           "Bytes this agent sent in collective calls, frame headers included");
  recv_bytes_ = NewCounter(r, "gradex_agent_received_bytes_total",
                           "Bytes this agent received in collective calls, frame headers included");
  steps_ok_ = &BuildCounter()
                   .Name("gradex_agent_steps_total")
                   .Help("Steps run, by outcome (ok, failed)")
                   .Register(r)
                   .Add({{"outcome", "ok"}});
  steps_failed_ = &BuildCounter()
                       .Name("gradex_agent_steps_total")
                       .Help("Steps run, by outcome (ok, failed)")
                       .Register(r)
                       .Add({{"outcome", "failed"}});
  epoch_changes_ = NewCounter(r, "gradex_agent_epoch_changes_total",
                              "Communicators built (one per epoch entered)");
  residual_nonfinite_ = NewCounter(r, "gradex_agent_residual_nonfinite_total",
                                   "Residual entries found NaN or infinite by a bucket's "
                                   "accumulation pass and reset to 0 (the bucket fails naming "
                                   "them)");
  auto& reuse = BuildCounter()
                    .Name("gradex_agent_topk_threshold_reuse_total")
                    .Help(
                        "Local top-k selections that reused the bucket's last threshold, by "
                        "outcome: hit (finished among the candidates of one pass) or miss (a "
                        "full select followed); either way the same selection")
                    .Register(r);
  reuse_hits_ = &reuse.Add({{"outcome", "hit"}});
  reuse_misses_ = &reuse.Add({{"outcome", "miss"}});
  report_drops_ = NewCounter(r, "gradex_agent_report_drops_total",
                             "Step reports dropped because the queue to the coordinator was full");
  result_nnz_ = NewGauge(r, "gradex_agent_result_nonzeros", "Non-zeros of the last call's result");
  result_density_ = NewGauge(r, "gradex_agent_result_density",
                             "Non-zeros of the last call's result divided by the elements");
  residual_l2_ = NewGauge(r, "gradex_agent_residual_l2_norm",
                          "L2 norm of this rank's residual after the last call");
  threshold_ = NewGauge(r, "gradex_agent_selection_threshold",
                        "Smallest non-zero magnitude in the last sparse result (the effective "
                        "global selection threshold)");
  epoch_ = NewGauge(r, "gradex_agent_epoch", "Epoch of the current communicator");
  members_ = NewGauge(r, "gradex_agent_members", "Ranks in the current epoch");
  rank_ = NewGauge(r, "gradex_agent_rank", "This agent's rank in the current epoch");
  details_ = &BuildGauge()
                  .Name("gradex_agent_call_detail")
                  .Help(
                      "The last call's algorithm-specific details (CallStats.details), by "
                      "algorithm, detail name and this rank's team position (rank mod P/T)")
                  .Register(r);
  rules_disagreements_ = &BuildCounter()
                              .Name("gradex_agent_rules_disagreements_total")
                              .Help(
                                  "Times this rank's own per-bucket rule differed from the one "
                                  "agreed in-band (the lowest rank's, which every rank applies), "
                                  "by field")
                              .Register(r);
  auto& stage_seconds = BuildCounter()
                            .Name("gradex_agent_stage_seconds_total")
                            .Help(
                                "Seconds the hierarchical exchange spent in each stage: intra_node "
                                "(reduce-scatter and all-gather among the node's ranks) and "
                                "inter_node (the sparse algorithm on this rank's shard across the "
                                "nodes); flat calls count in neither")
                            .Register(r);
  auto& stage_bytes = BuildCounter()
                          .Name("gradex_agent_stage_bytes_total")
                          .Help(
                              "Bytes the hierarchical exchange sent and received in each stage "
                              "(intra_node, inter_node); flat calls count in neither")
                          .Register(r);
  // Every stage's children exist from the start (at 0): exported by flat
  // jobs too, so the dashboards' queries return data for both.
  auto stage = [&](const char* name) {
    return Stage{&stage_seconds.Add({{"stage", name}}),
                 &stage_bytes.Add({{"stage", name}, {"direction", "sent"}}),
                 &stage_bytes.Add({{"stage", name}, {"direction", "received"}})};
  };
  intra_node_ = stage("intra_node");
  inter_node_ = stage("inter_node");
  hierarchy_nodes_ = NewGauge(r, "gradex_agent_hierarchy_nodes",
                              "Nodes of the last call's hierarchical exchange (0: it ran flat)");
  hierarchy_ranks_per_node_ =
      NewGauge(r, "gradex_agent_hierarchy_ranks_per_node",
               "Ranks per node of the last call's hierarchical exchange (0: it ran flat)");
  // Each field's child exists from the start (at 0), so the family is
  // exported before any disagreement.
  for (const char* field : {"start_iter", "min_compression_rate", "dense_probe_period"}) {
    rules_disagreements_->Add({{"field", field}});
  }
  auto& frames = BuildCounter()
                     .Name("gradex_agent_frame_errors_total")
                     .Help(
                         "Received data-plane frames rejected by validation, by reason "
                         "(process-wide)")
                     .Register(r);
  for (int e = 0; e < static_cast<int>(collectives::wire::FrameError::kCount); ++e) {
    frame_errors_[e] =
        &frames.Add({{"reason", std::string(collectives::wire::FrameErrorName(
                                    static_cast<collectives::wire::FrameError>(e)))}});
  }
}

AgentMetrics::~AgentMetrics() = default;

absl::Status AgentMetrics::Serve(const std::string& bind) {
  // civetweb reports a failed bind by throwing; this is the one place it can.
  try {
    exposer_ = metrics::MakeMetricsExposer(bind);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("metrics: cannot listen on ", bind, ": ", e.what()));
  }
  exposer_->RegisterCollectable(registry_);
  return absl::OkStatus();
}

int AgentMetrics::port() const {
  if (exposer_ == nullptr) return -1;
  const std::vector<int> ports = exposer_->GetListeningPorts();
  return ports.empty() ? -1 : ports.front();
}

void AgentMetrics::ObserveCall(const std::string& algorithm, const collectives::CallStats& stats,
                               size_t n, double residual_l2,
                               const collectives::AllreduceResult& result, int team_position) {
  if (const double bad = stats.Detail("residual_nonfinite"); bad > 0) {
    residual_nonfinite_->Increment(bad);
  }
  reuse_hits_->Increment(stats.Detail("topk_reuse_hits"));
  reuse_misses_->Increment(stats.Detail("topk_reuse_misses"));
  auto observe = [&](const char* phase, double s) {
    call_seconds_->Add({{"algorithm", algorithm}, {"phase", phase}}, LatencyBuckets()).Observe(s);
  };
  observe("total", stats.total_s);
  observe("selection", stats.phases.selection_s);
  observe("communication", stats.phases.communication_s);
  observe("reduction", stats.phases.reduction_s);
  sent_bytes_->Increment(static_cast<double>(stats.sent_bytes));
  recv_bytes_->Increment(static_cast<double>(stats.recv_bytes));
  result_nnz_->Set(static_cast<double>(stats.result_nnz));
  result_density_->Set(n == 0 ? 0 : static_cast<double>(stats.result_nnz) / n);
  residual_l2_->Set(residual_l2);
  if (!result.is_dense) {
    float t = 0;
    for (float v : result.sparse.val) {
      const float a = std::fabs(v);
      if (a > 0 && (t == 0 || a < t)) t = a;
    }
    threshold_->Set(t);
  }
  ObserveStages(stats);
  for (const auto& [name, value] : stats.details) {
    details_
        ->Add({{"algorithm", algorithm},
               {"detail", name},
               {"team_position", std::to_string(team_position)}})
        .Set(value);
  }
}

void AgentMetrics::ObserveStages(const collectives::CallStats& stats) {
  hierarchy_nodes_->Set(stats.Detail(collectives::algorithms::kDetailHierarchyNodes));
  hierarchy_ranks_per_node_->Set(
      stats.Detail(collectives::algorithms::kDetailHierarchyRanksPerNode));
  // A flat call sets none of the stage details, so it adds to neither stage:
  // whether its peers share this rank's node is not known here.
  auto add = [&](const Stage& s, std::string_view seconds, std::string_view sent,
                 std::string_view received) {
    s.seconds->Increment(std::max(stats.Detail(seconds), 0.0));
    s.sent->Increment(std::max(stats.Detail(sent), 0.0));
    s.received->Increment(std::max(stats.Detail(received), 0.0));
  };
  add(intra_node_, collectives::algorithms::kDetailIntraNodeSeconds,
      collectives::algorithms::kDetailIntraNodeSentBytes,
      collectives::algorithms::kDetailIntraNodeRecvBytes);
  add(inter_node_, collectives::algorithms::kDetailInterNodeSeconds,
      collectives::algorithms::kDetailInterNodeSentBytes,
      collectives::algorithms::kDetailInterNodeRecvBytes);
}

void AgentMetrics::StepOk() { steps_ok_->Increment(); }
void AgentMetrics::StepFailed() { steps_failed_->Increment(); }

void AgentMetrics::Membership(uint32_t epoch, int members, int rank) {
  epoch_->Set(epoch);
  members_->Set(members);
  rank_->Set(rank);
}

void AgentMetrics::EpochChange() { epoch_changes_->Increment(); }

void AgentMetrics::RulesDisagreement(const std::string& field) {
  rules_disagreements_->Add({{"field", field}}).Increment();
}

void AgentMetrics::SyncCounters(uint64_t report_drops) {
  const auto counts = collectives::wire::FrameErrorCounts();
  for (size_t e = 0; e < counts.size(); ++e) {
    if (counts[e] > frame_seen_[e]) {
      frame_errors_[e]->Increment(static_cast<double>(counts[e] - frame_seen_[e]));
      frame_seen_[e] = counts[e];
    }
  }
  if (report_drops > drops_seen_) {
    report_drops_->Increment(static_cast<double>(report_drops - drops_seen_));
    drops_seen_ = report_drops;
  }
}

}  // namespace gradex::pipeline
