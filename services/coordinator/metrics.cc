#include "services/coordinator/metrics.h"

#include "version/build_info_metric.h"

namespace gradex::coordinator {
namespace {

prometheus::Family<prometheus::Counter>& CounterFamily(prometheus::Registry& r, const char* name,
                                                       const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r);
}
prometheus::Family<prometheus::Gauge>& GaugeFamily(prometheus::Registry& r, const char* name,
                                                   const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r);
}

}  // namespace

CoordinatorMetrics::CoordinatorMetrics(prometheus::Registry& r)
    : members_family(GaugeFamily(r, "gradex_coordinator_members",
                                 "Members by state (active: in the latest epoch; pending: "
                                 "waiting for admission)")),
      joins_family(CounterFamily(r, "gradex_coordinator_joins_total",
                                 "Joins accepted, by kind (fresh, or rejoin with a last epoch)")),
      reports_family(CounterFamily(r, "gradex_coordinator_step_reports_total",
                                   "Step reports by result (accepted; ignored: stale epoch or "
                                   "not a member of it)")),
      fallbacks_family(CounterFamily(r, "gradex_coordinator_bucket_fallbacks_total",
                                     "Per-bucket switches of the never-slower-than-dense rule, by "
                                     "direction (to_dense, to_sparse)")),
      stall_blames(CounterFamily(r, "gradex_coordinator_stall_blames_total",
                                 "Stalled steps by the rank blamed (and its host): behind the "
                                 "furthest rank, or where the other ranks' waits end")),
      rpc_duration(prometheus::BuildHistogram()
                       .Name("gradex_coordinator_rpc_duration_seconds")
                       .Help("Coordinator RPC handling time by method (streams: their lifetime)")
                       .Register(r)),
      rpc_errors(CounterFamily(r, "gradex_coordinator_rpc_errors_total",
                               "Coordinator RPCs that failed, by method and gRPC code")),
      auth_failures(CounterFamily(r, "gradex_coordinator_auth_failures_total",
                                  "RPCs refused for a wrong or missing job token, by method")),
      epoch(GaugeFamily(r, "gradex_coordinator_epoch", "The job's latest epoch").Add({})),
      members_active(members_family.Add({{"state", "active"}})),
      members_pending(members_family.Add({{"state", "pending"}})),
      joins_fresh(joins_family.Add({{"kind", "fresh"}})),
      joins_rejoin(joins_family.Add({{"kind", "rejoin"}})),
      version_mismatch_joins(
          CounterFamily(r, "gradex_coordinator_version_mismatch_joins_total",
                        "Joins accepted from members that run another gradex release than the "
                        "coordinator (same wire protocol; a different one is refused)")
              .Add({})),
      evictions(CounterFamily(r, "gradex_coordinator_evictions_total",
                              "Members evicted (lease expired, epoch not entered in time, or "
                              "silent when another loss changed the epoch)")
                    .Add({})),
      entry_evictions(CounterFamily(r, "gradex_coordinator_entry_evictions_total",
                                    "Members evicted because they did not enter an epoch within "
                                    "entry_timeout")
                          .Add({})),
      node_evictions(CounterFamily(r, "gradex_coordinator_node_evictions_total",
                                   "Members evicted with their node because another member on "
                                   "it failed (collective jobs)")
                         .Add({})),
      leaves(CounterFamily(r, "gradex_coordinator_leaves_total", "Members that left (Leave RPC)")
                 .Add({})),
      plan_version(
          GaugeFamily(r, "gradex_coordinator_plan_version", "Latest plan version").Add({})),
      plans_published(
          CounterFamily(r, "gradex_coordinator_plans_published_total", "Plan versions published")
              .Add({})),
      stalled_steps(CounterFamily(r, "gradex_coordinator_stalled_steps_total",
                                  "Steps some ranks had not finished a step deadline after the "
                                  "first rank did")
                        .Add({})),
      stalled_ranks(
          GaugeFamily(r, "gradex_coordinator_stalled_ranks",
                      "Ranks behind the furthest rank past the step deadline (last check)")
              .Add({})),
      step_failures(CounterFamily(r, "gradex_coordinator_step_failures_total",
                                  "Step reports that carried an error")
                        .Add({})),
      bad_frame_blames(CounterFamily(r, "gradex_coordinator_bad_frame_blames_total",
                                     "Failed-step reports that named another member of their "
                                     "epoch as the sender of a refused frame (it is evicted)")
                           .Add({})),
      reports_accepted(reports_family.Add({{"result", "accepted"}})),
      reports_ignored(reports_family.Add({{"result", "ignored"}})),
      covap_ccr(GaugeFamily(r, "gradex_coordinator_covap_ccr",
                            "COVAP communication-to-computation ratio measured (0: not yet)")
                    .Add({})),
      covap_interval(
          GaugeFamily(r, "gradex_coordinator_covap_interval", "COVAP filter interval I in the plan")
              .Add({})),
      teams(GaugeFamily(r, "gradex_coordinator_teams", "SparDL team count in the plan").Add({})),
      link_alpha(GaugeFamily(r, "gradex_coordinator_link_alpha_seconds",
                             "Per-message link latency the automatic team count used (max over "
                             "ranks of the epoch; 0: not measured)")
                     .Add({})),
      link_beta(GaugeFamily(r, "gradex_coordinator_link_beta_seconds_per_byte",
                            "Per-byte link cost the automatic team count used (max over ranks of "
                            "the epoch; 0: not measured)")
                    .Add({})),
      bucket_fallbacks_to_dense(fallbacks_family.Add({{"direction", "to_dense"}})),
      bucket_fallbacks_to_sparse(fallbacks_family.Add({{"direction", "to_sparse"}})),
      buckets_dense(GaugeFamily(r, "gradex_coordinator_buckets_dense",
                                "Buckets the plan runs dense because their sparse exchange was "
                                "slower than a dense one")
                        .Add({})),
      nodes(GaugeFamily(r, "gradex_coordinator_nodes",
                        "Nodes (distinct member hosts) of the latest plan's epoch")
                .Add({})),
      ranks_per_node(GaugeFamily(r, "gradex_coordinator_ranks_per_node",
                                 "Ranks on each node of the latest plan's epoch (0: uneven)")
                         .Add({})),
      roles_family(GaugeFamily(r, "gradex_coordinator_epoch_members",
                               "Members of the latest epoch by role (worker, server)")),
      ps_shards(GaugeFamily(r, "gradex_coordinator_ps_shards",
                            "Server shards of a parameter-server job (0: none)")
                    .Add({})),
      ps_workers(roles_family.Add({{"role", "worker"}})),
      ps_servers(roles_family.Add({{"role", "server"}})),
      ps_unserved(GaugeFamily(r, "gradex_coordinator_ps_shards_unserved",
                              "1 while the latest epoch of a parameter-server job has no server")
                      .Add({})),
      ps_shard_moves(CounterFamily(r, "gradex_coordinator_ps_shard_moves_total",
                                   "Server shards that moved to another member")
                         .Add({})),
      member_info(GaugeFamily(r, "gradex_coordinator_member_info",
                              "1 per member of the latest epoch (per shard held, for a server): "
                              "rank, host, role, a worker's slot, a server's shard and its "
                              "parameter range [first, last)")),
      members_unlisted(GaugeFamily(r, "gradex_coordinator_members_unlisted",
                                   "Rows of the latest epoch's membership view left out of "
                                   "gradex_coordinator_member_info by its cap (512 series)")
                           .Add({})),
      connections_refused_family(
          CounterFamily(r, "gradex_coordinator_connections_refused_total",
                        "Connections the coordinator's listener closed at once, by reason "
                        "(over_cap: past the descriptor cap below the fd limit; exhausted: "
                        "no descriptor left)")),
      connections_over_cap(connections_refused_family.Add({{"reason", "over_cap"}})),
      connections_exhausted(connections_refused_family.Add({{"reason", "exhausted"}})) {
  version::RegisterBuildInfo(r);
}

void CoordinatorMetrics::ObserveRpc(const std::string& method, int code, double seconds) {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1, 3, 10, 30, 100};
  rpc_duration.Add({{"method", method}}, kBuckets).Observe(seconds);
  if (code != 0) rpc_errors.Add({{"method", method}, {"code", CodeName(code)}}).Increment();
}

void CoordinatorMetrics::AuthFailure(const std::string& method) {
  auth_failures.Add({{"method", method}}).Increment();
}

void CoordinatorMetrics::ExpectStallBlame(int rank, const std::string& host) {
  stall_blames.Add({{"rank", std::to_string(rank)}, {"host", host}});
}

void CoordinatorMetrics::BlameStall(int rank, const std::string& host) {
  stall_blames.Add({{"rank", std::to_string(rank)}, {"host", host}}).Increment();
}

std::string CodeName(int code) {
  static const char* kNames[] = {"OK",
                                 "CANCELLED",
                                 "UNKNOWN",
                                 "INVALID_ARGUMENT",
                                 "DEADLINE_EXCEEDED",
                                 "NOT_FOUND",
                                 "ALREADY_EXISTS",
                                 "PERMISSION_DENIED",
                                 "RESOURCE_EXHAUSTED",
                                 "FAILED_PRECONDITION",
                                 "ABORTED",
                                 "OUT_OF_RANGE",
                                 "UNIMPLEMENTED",
                                 "INTERNAL",
                                 "UNAVAILABLE",
                                 "DATA_LOSS",
                                 "UNAUTHENTICATED"};
  if (code >= 0 && code < static_cast<int>(sizeof(kNames) / sizeof(kNames[0]))) return kNames[code];
  return "CODE_" + std::to_string(code);
}

}  // namespace gradex::coordinator
