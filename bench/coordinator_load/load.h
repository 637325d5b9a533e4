// Coordinator load test: many simulated agents (one gRPC callback call each
// in flight at most) join an in-process coordinator on loopback and heartbeat
// at the interval it suggests, for a bounded time. Measures join throughput,
// heartbeat latency and whether every heartbeating agent kept its lease.
#ifndef GRADEX_BENCH_COORDINATOR_LOAD_LOAD_H_
#define GRADEX_BENCH_COORDINATOR_LOAD_LOAD_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gradex::bench {

struct LoadOptions {
  int agents = 10000;
  absl::Duration duration = absl::Seconds(30);  // heartbeating, after all joined
  absl::Duration lease = absl::Seconds(10);
  int channels = 8;          // client connections the agents share
  int join_in_flight = 256;  // concurrent Join calls
  // Agents that join and then never heartbeat: the coordinator must evict
  // exactly these (a check that the eviction count below can be non-zero).
  int silent = 0;
};

struct LoadResult {
  int joined = 0;
  double join_seconds = 0;
  uint64_t heartbeats_ok = 0;
  uint64_t heartbeats_failed = 0;  // any non-OK status (NOT_FOUND = evicted)
  uint64_t heartbeats_late = 0;    // the previous call was still in flight when due
  double latency_us_median = 0, latency_us_p90 = 0, latency_us_p99 = 0, latency_us_max = 0;
  double max_gap_over_lease = 0;  // longest gap between renewals of one agent / lease
  double heartbeats_per_second = 0;
  size_t members_at_end = 0;  // the coordinator's own count
  uint64_t evictions = 0;     // the coordinator's evictions counter
  // This process's CPU use while heartbeating (client and server share it):
  // what the load costs, whatever else the machine is running.
  double cpu_cores = 0;
  double cpu_us_per_heartbeat = 0;
  std::string ToString() const;
};

absl::StatusOr<LoadResult> RunCoordinatorLoad(const LoadOptions& opts);

}  // namespace gradex::bench

#endif  // GRADEX_BENCH_COORDINATOR_LOAD_LOAD_H_
