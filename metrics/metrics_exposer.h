// The Prometheus endpoint of the coordinator, the agents and the DGS
// servers. prometheus-cpp's default serves with 2 civetweb threads and
// civetweb's 30 s request timeout: two clients that open a connection and
// send their request slowly (or never finish it) held both threads, and
// scrapes timed out. Here more threads serve, and a request not read in
// full within kMetricsRequestTimeoutMs is dropped, so slow clients delay a
// scrape by at most that, and only when they outnumber the threads.
#ifndef GRADEX_METRICS_METRICS_EXPOSER_H_
#define GRADEX_METRICS_METRICS_EXPOSER_H_

#include <prometheus/exposer.h>

#include <memory>
#include <string>
#include <vector>

namespace gradex {

inline constexpr int kMetricsThreads = 8;
inline constexpr int kMetricsRequestTimeoutMs = 3000;

// Listens on `bind` ("host:port"); throws as prometheus::Exposer does when
// it cannot.
inline std::unique_ptr<prometheus::Exposer> MakeMetricsExposer(const std::string& bind) {
  return std::make_unique<prometheus::Exposer>(std::vector<std::string>{
      "listening_ports", bind, "num_threads", std::to_string(kMetricsThreads), "request_timeout_ms",
      std::to_string(kMetricsRequestTimeoutMs)});
}

}  // namespace gradex

#endif  // GRADEX_METRICS_METRICS_EXPOSER_H_
