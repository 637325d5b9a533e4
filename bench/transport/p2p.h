// Point-to-point measurements over any Transport between ranks 0 and 1 of it:
// ping-pong latency and streaming bandwidth (the shape of ucx_perftest's
// tag_lat and tag_bw), plus where the receiver's time went.
#ifndef GRADEX_BENCH_TRANSPORT_P2P_H_
#define GRADEX_BENCH_TRANSPORT_P2P_H_

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"
#include "transport/transport.h"

namespace gradex::bench {

struct P2pOptions {
  size_t bytes = 1 << 20;
  int iters = 20;      // timed messages (bandwidth) or round trips (latency)
  int warmup = 2;      // untimed, before the timed ones
  int window = 8;      // bandwidth: sends kept in flight, like ucx_perftest's
  bool capped = true;  // receives posted with their exact size (PostRecvAtMost)
  transport::Deadline deadline;
};

struct P2pResult {
  size_t bytes = 0;
  double one_way_us = 0;           // latency: median round trip / 2
  double bandwidth_mbs = 0;        // bandwidth: bytes per second / 1e6, receiver's clock
  double wall_s = 0;               // the timed part, receiver's clock
  transport::RecvProfile profile;  // the receiver's, over the timed part
};

// Both ranks call it with the same options; rank 0 sends, rank 1 receives.
// Only rank 1's result has the profile and bandwidth; both have latency.
absl::StatusOr<P2pResult> MeasureLatency(transport::Transport& t, const P2pOptions& o);
absl::StatusOr<P2pResult> MeasureBandwidth(transport::Transport& t, const P2pOptions& o);

// Sizes from `lo` to `hi` by factors of 4 (hi included).
std::vector<size_t> SizeLadder(size_t lo, size_t hi);

}  // namespace gradex::bench

#endif  // GRADEX_BENCH_TRANSPORT_P2P_H_
