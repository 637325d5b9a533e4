// AgentMetrics on hand-made CallStats: the hierarchical exchange's stage
// counters (gradex_agent_stage_seconds_total, gradex_agent_stage_bytes_total)
// add each hierarchical call's intra_node / inter_node details, flat calls add
// nothing, and the layout gauges follow the last call (0 when it ran flat).
// Every series is exported, at 0, before any call.
#include "pipeline/agent_metrics.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>

#include "prometheus/registry.h"

namespace gradex {
namespace {

using Labels = std::map<std::string, std::string>;

// The exported value of `name`'s series with exactly `labels`, or nullopt.
std::optional<double> Value(const pipeline::AgentMetrics& m, const std::string& name,
                            const Labels& labels) {
  for (const prometheus::MetricFamily& f : m.registry()->Collect()) {
    if (f.name != name) continue;
    for (const prometheus::ClientMetric& c : f.metric) {
      Labels got;
      for (const auto& l : c.label) got[l.name] = l.value;
      if (got != labels) continue;
      return f.type == prometheus::MetricType::Counter ? c.counter.value : c.gauge.value;
    }
  }
  return std::nullopt;
}

double StageSeconds(const pipeline::AgentMetrics& m, const std::string& stage) {
  return Value(m, "gradex_agent_stage_seconds_total", {{"stage", stage}}).value_or(-1);
}

double StageBytes(const pipeline::AgentMetrics& m, const std::string& stage,
                  const std::string& direction) {
  return Value(m, "gradex_agent_stage_bytes_total", {{"stage", stage}, {"direction", direction}})
      .value_or(-1);
}

double Gauge(const pipeline::AgentMetrics& m, const std::string& name) {
  return Value(m, name, {}).value_or(-1);
}

// A hierarchical call on `nodes` x `per_node` whose stage details are
// `scale` times distinct base values, so a swapped field shows.
collectives::CallStats Hierarchical(double nodes, double per_node, double scale) {
  collectives::CallStats s;
  s.total_s = 1.0 * scale;
  s.sent_bytes = static_cast<uint64_t>(1000 * scale);
  s.recv_bytes = static_cast<uint64_t>(2000 * scale);
  s.details = {{"hierarchy_nodes", nodes},
               {"hierarchy_ranks_per_node", per_node},
               {"intra_node_s", 0.25 * scale},
               {"inter_node_s", 0.5 * scale},
               {"intra_node_sent_bytes", 100 * scale},
               {"intra_node_recv_bytes", 200 * scale},
               {"inter_node_sent_bytes", 300 * scale},
               {"inter_node_recv_bytes", 400 * scale}};
  return s;
}

void Observe(pipeline::AgentMetrics& m, const collectives::CallStats& s) {
  collectives::AllreduceResult result;
  result.is_dense = true;
  result.dense.assign(8, 0.0f);
  m.ObserveCall("spardl", s, 8, 0.0, result, 0);
}

TEST(AgentMetricsTest, StageSeriesAreExportedAtZeroBeforeAnyCall) {
  pipeline::AgentMetrics m;
  for (const char* stage : {"intra_node", "inter_node"}) {
    EXPECT_EQ(StageSeconds(m, stage), 0) << stage;
    EXPECT_EQ(StageBytes(m, stage, "sent"), 0) << stage;
    EXPECT_EQ(StageBytes(m, stage, "received"), 0) << stage;
  }
  EXPECT_EQ(Gauge(m, "gradex_agent_hierarchy_nodes"), 0);
  EXPECT_EQ(Gauge(m, "gradex_agent_hierarchy_ranks_per_node"), 0);
}

TEST(AgentMetricsTest, HierarchicalCallsAddTheirStageDetails) {
  pipeline::AgentMetrics m;
  Observe(m, Hierarchical(2, 4, 1));
  Observe(m, Hierarchical(2, 4, 3));
  EXPECT_DOUBLE_EQ(StageSeconds(m, "intra_node"), 0.25 * 4);
  EXPECT_DOUBLE_EQ(StageSeconds(m, "inter_node"), 0.5 * 4);
  EXPECT_DOUBLE_EQ(StageBytes(m, "intra_node", "sent"), 100 * 4);
  EXPECT_DOUBLE_EQ(StageBytes(m, "intra_node", "received"), 200 * 4);
  EXPECT_DOUBLE_EQ(StageBytes(m, "inter_node", "sent"), 300 * 4);
  EXPECT_DOUBLE_EQ(StageBytes(m, "inter_node", "received"), 400 * 4);
  EXPECT_EQ(Gauge(m, "gradex_agent_hierarchy_nodes"), 2);
  EXPECT_EQ(Gauge(m, "gradex_agent_hierarchy_ranks_per_node"), 4);
  // The call totals are still counted once, not again per stage.
  EXPECT_DOUBLE_EQ(Value(m, "gradex_agent_sent_bytes_total", {}).value_or(-1), 1000 * 4);
  EXPECT_DOUBLE_EQ(Value(m, "gradex_agent_received_bytes_total", {}).value_or(-1), 2000 * 4);
}

TEST(AgentMetricsTest, FlatCallsAddNothingToTheStagesAndZeroTheLayout) {
  pipeline::AgentMetrics m;
  Observe(m, Hierarchical(4, 2, 1));
  EXPECT_EQ(Gauge(m, "gradex_agent_hierarchy_nodes"), 4);
  EXPECT_EQ(Gauge(m, "gradex_agent_hierarchy_ranks_per_node"), 2);
  collectives::CallStats flat;
  flat.total_s = 7;
  flat.sent_bytes = 5000;
  flat.recv_bytes = 6000;
  flat.details = {{"local_selected", 3}};
  Observe(m, flat);
  // Only the hierarchical call's stage values remain.
  EXPECT_DOUBLE_EQ(StageSeconds(m, "intra_node"), 0.25);
  EXPECT_DOUBLE_EQ(StageSeconds(m, "inter_node"), 0.5);
  EXPECT_DOUBLE_EQ(StageBytes(m, "intra_node", "sent"), 100);
  EXPECT_DOUBLE_EQ(StageBytes(m, "inter_node", "received"), 400);
  EXPECT_EQ(Gauge(m, "gradex_agent_hierarchy_nodes"), 0);
  EXPECT_EQ(Gauge(m, "gradex_agent_hierarchy_ranks_per_node"), 0);
  EXPECT_DOUBLE_EQ(Value(m, "gradex_agent_sent_bytes_total", {}).value_or(-1), 1000 + 5000);
}

TEST(AgentMetricsTest, AbsentStageDetailsCountAsZero) {
  pipeline::AgentMetrics m;
  collectives::CallStats s;
  s.details = {{"hierarchy_nodes", 2},
               {"hierarchy_ranks_per_node", 2},
               {"inter_node_s", 1.5},
               {"inter_node_sent_bytes", 64}};
  Observe(m, s);
  EXPECT_EQ(StageSeconds(m, "intra_node"), 0);
  EXPECT_EQ(StageBytes(m, "intra_node", "sent"), 0);
  EXPECT_EQ(StageBytes(m, "inter_node", "received"), 0);
  EXPECT_DOUBLE_EQ(StageSeconds(m, "inter_node"), 1.5);
  EXPECT_DOUBLE_EQ(StageBytes(m, "inter_node", "sent"), 64);
}

}  // namespace
}  // namespace gradex
