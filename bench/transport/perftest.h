// Runs UCX's own ucx_perftest (ucx-utils) between two processes on this
// machine, for the transport benchmark's side-by-side columns.
#ifndef GRADEX_BENCH_TRANSPORT_PERFTEST_H_
#define GRADEX_BENCH_TRANSPORT_PERFTEST_H_

#include <cstddef>

namespace gradex::bench {

struct PerftestResult {
  bool ok = false;
  double bandwidth_gbs = 0;  // tag_bw, average, 1e9 bytes/s
  double latency_us = 0;     // tag_lat, median one-way
};

// Server and client of `ucx_perftest -t tag_bw` then `-t tag_lat` on
// 127.0.0.1:`port`; ok is false when ucx_perftest is missing or fails.
PerftestResult RunPerftest(size_t bytes, int iters, int port);

}  // namespace gradex::bench

#endif  // GRADEX_BENCH_TRANSPORT_PERFTEST_H_
