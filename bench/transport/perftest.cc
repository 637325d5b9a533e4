#include "bench/transport/perftest.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace gradex::bench {
namespace {

// The numbers of ucx_perftest's "Final:" line: iterations, then latency
// (50th percentile, average, overall; us), bandwidth (average, overall;
// MiB/s), message rate (average, overall).
std::vector<double> FinalLine(const std::string& out) {
  std::vector<double> v;
  size_t at = out.rfind("Final:");
  if (at == std::string::npos) return v;
  std::string line = out.substr(at + 6, out.find('\n', at) - at - 6);
  for (absl::string_view f : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
    double d = 0;
    if (!absl::SimpleAtod(f, &d)) return {};
    v.push_back(d);
  }
  return v;
}

// Runs a server then its client; returns the client's output, "" on failure.
std::string RunPair(const std::string& test, size_t bytes, int iters, int port) {
  const std::string args =
      absl::StrCat(" -t ", test, " -s ", bytes, " -n ", iters, " -p ", port, " 2>&1");
  FILE* server = popen(absl::StrCat("exec ucx_perftest", args).c_str(), "r");
  if (server == nullptr) return "";
  std::string out;
  // The server needs a moment to listen; the client retries a few times.
  for (int attempt = 0; attempt < 20 && out.find("Final:") == std::string::npos; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    FILE* client = popen(absl::StrCat("ucx_perftest 127.0.0.1", args).c_str(), "r");
    if (client == nullptr) break;
    out.clear();
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), client)) > 0) out.append(buf, n);
    pclose(client);
  }
  char drain[4096];
  while (fread(drain, 1, sizeof(drain), server) > 0) {
  }
  pclose(server);
  return out;
}

}  // namespace

PerftestResult RunPerftest(size_t bytes, int iters, int port) {
  PerftestResult r;
  std::vector<double> bw = FinalLine(RunPair("tag_bw", bytes, iters, port));
  std::vector<double> lat = FinalLine(RunPair("tag_lat", bytes, std::min(iters, 100), port));
  if (bw.size() < 5) return r;
  r.ok = true;
  r.bandwidth_gbs = bw[4] * 1048576.0 / 1e9;
  if (lat.size() >= 2) r.latency_us = lat[1];
  return r;
}

}  // namespace gradex::bench
