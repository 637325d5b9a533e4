// The coordinator's Prometheus metrics (docs/metrics.md, "Coordinator").
#ifndef GRADEX_SERVICES_COORDINATOR_METRICS_H_
#define GRADEX_SERVICES_COORDINATOR_METRICS_H_

#include <string>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace gradex::coordinator {

struct CoordinatorMetrics {
  explicit CoordinatorMetrics(prometheus::Registry& registry);

  // One RPC finished: latency by method, and an error count by method and
  // gRPC code name when it failed.
  void ObserveRpc(const std::string& method, int code, double seconds);
  void AuthFailure(const std::string& method);
  // A stalled step blamed on `rank` (of the running epoch) on `host`: the
  // laggard, or the rank the others' waits end at. Expect() creates the
  // child at 0 (every rank of a new epoch), so that the first blame is an
  // increase Prometheus sees.
  void ExpectStallBlame(int rank, const std::string& host);
  void BlameStall(int rank, const std::string& host);

  // Families with more than one labelled child (declared before the children).
  prometheus::Family<prometheus::Gauge>& members_family;
  prometheus::Family<prometheus::Counter>& joins_family;
  prometheus::Family<prometheus::Counter>& reports_family;
  prometheus::Family<prometheus::Counter>& fallbacks_family;
  prometheus::Family<prometheus::Counter>& stall_blames;

  prometheus::Family<prometheus::Histogram>& rpc_duration;
  prometheus::Family<prometheus::Counter>& rpc_errors;
  prometheus::Family<prometheus::Counter>& auth_failures;
  prometheus::Gauge& epoch;
  prometheus::Gauge& members_active;
  prometheus::Gauge& members_pending;
  prometheus::Counter& joins_fresh;
  prometheus::Counter& joins_rejoin;
  // Joins of members that run another gradex release (same wire protocol).
  prometheus::Counter& version_mismatch_joins;
  prometheus::Counter& evictions;
  prometheus::Counter& entry_evictions;  // of which: did not enter an epoch in time
  prometheus::Counter& node_evictions;   // of which: taken out with their node
  prometheus::Counter& leaves;
  prometheus::Gauge& plan_version;
  prometheus::Counter& plans_published;
  prometheus::Counter& stalled_steps;
  prometheus::Gauge& stalled_ranks;
  prometheus::Counter& step_failures;
  prometheus::Counter& bad_frame_blames;
  prometheus::Counter& reports_accepted;
  prometheus::Counter& reports_ignored;
  prometheus::Gauge& covap_ccr;
  prometheus::Gauge& covap_interval;
  prometheus::Gauge& teams;
  // auto_teams: the epoch's link cost the team choice used (max over ranks).
  prometheus::Gauge& link_alpha;
  prometheus::Gauge& link_beta;
  // The bucket controller: dense fallback switches by direction, and the
  // buckets the plan runs dense by fallback now.
  prometheus::Counter& bucket_fallbacks_to_dense;
  prometheus::Counter& bucket_fallbacks_to_sparse;
  prometheus::Gauge& buckets_dense;
  // The latest plan's node layout: nodes, and ranks on each (0: uneven).
  prometheus::Gauge& nodes;
  prometheus::Gauge& ranks_per_node;
  // Parameter-server jobs (DGS): the server shards of the plan, the latest
  // epoch's members by role, whether the shards have no server now, and how
  // often a shard moved to another member (server restarts, losses).
  prometheus::Family<prometheus::Gauge>& roles_family;
  prometheus::Gauge& ps_shards;
  prometheus::Gauge& ps_workers;
  prometheus::Gauge& ps_servers;
  prometheus::Gauge& ps_unserved;
  prometheus::Counter& ps_shard_moves;
  // The membership view (membership_view.h): one series per member of the
  // latest epoch (per shard held, for a server), and the rows over its cap.
  prometheus::Family<prometheus::Gauge>& member_info;
  prometheus::Gauge& members_unlisted;
  // Connections the listener closed at once (accept_guard.h), by reason:
  // over_cap (the descriptor cap), exhausted (EMFILE / ENFILE anyway).
  prometheus::Family<prometheus::Counter>& connections_refused_family;
  prometheus::Counter& connections_over_cap;
  prometheus::Counter& connections_exhausted;
};

// The gRPC status code's canonical name ("OK", "INVALID_ARGUMENT", ...).
std::string CodeName(int code);

}  // namespace gradex::coordinator

#endif  // GRADEX_SERVICES_COORDINATOR_METRICS_H_
