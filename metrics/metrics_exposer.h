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
#include <mutex>
#include <string>
#include <vector>

namespace gradex::metrics {

inline constexpr int kMetricsThreads = 8;
inline constexpr int kMetricsRequestTimeoutMs = 3000;

// civetweb, under prometheus-cpp's Exposer, initialises its library when the
// first server starts and tears it down when the last one stops, with no lock
// of its own (its docs: the caller calls it from one thread). Two exposers
// starting at once in one process (ranks as threads, a worker beside the
// server it hosts) re-initialised a mutex the other held, and the process
// aborted. So every exposer of the process starts and stops under one lock.
inline std::mutex& ExposerLifetimeMutex() {
  static std::mutex mu;
  return mu;
}

struct ExposerDeleter {
  void operator()(prometheus::Exposer* e) const {
    std::lock_guard<std::mutex> lock(ExposerLifetimeMutex());
    delete e;
  }
};

using MetricsExposer = std::unique_ptr<prometheus::Exposer, ExposerDeleter>;

// Listens on `bind` ("host:port"); throws as prometheus::Exposer does when
// it cannot.
inline MetricsExposer MakeMetricsExposer(const std::string& bind) {
  std::lock_guard<std::mutex> lock(ExposerLifetimeMutex());
  return MetricsExposer(new prometheus::Exposer(std::vector<std::string>{
      "listening_ports", bind, "num_threads", std::to_string(kMetricsThreads), "request_timeout_ms",
      std::to_string(kMetricsRequestTimeoutMs)}));
}

}  // namespace gradex::metrics

#endif  // GRADEX_METRICS_METRICS_EXPOSER_H_
