// A parameter server whose snapshot directory cannot be written (here: a
// path under a file, which fails as root too): every failure is counted and
// the snapshot health gauge drops to 0, on the hosting worker's /metrics as
// Prometheus scrapes it (before: a log line only). A writable directory
// keeps the gauge at 1 and counts nothing. One worker thread embeds the
// coordinator and hosts the shard (real gRPC and UCX on loopback).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <thread>

#include "ps/ps_worker.h"
#include "tests/coordinator/client_util.h"

namespace gradex::client {
namespace {

double Get(const std::map<std::string, double>& m, const std::string& key) {
  auto it = m.find(key);
  EXPECT_NE(it, m.end()) << "no sample " << key;
  return it == m.end() ? -1 : it->second;
}

std::map<std::string, double> RunWithSnapshots(const std::string& job, const std::string& dir) {
  ps::PsWorkerOptions o;
  o.client.job = job;
  o.client.rank = 0;
  o.client.world_size = 1;
  o.client.timeout = std::chrono::seconds(20);
  o.client.metrics_port = 0;
  o.layer_sizes = {100, 37};
  o.density = 0.1f;
  o.snapshot_dir = dir;
  o.snapshot_interval = std::chrono::milliseconds(100);
  auto w = ps::PsWorker::Create(o);
  EXPECT_TRUE(w.ok()) << w.status();
  if (!w.ok()) return {};
  std::vector<float> p(137, 0.f), g(137, 0.5f);
  for (int s = 0; s < 5; ++s) EXPECT_TRUE((*w)->Step(g, p, 0.05f).ok());
  // Several snapshot intervals (100 ms) and server reports (250 ms).
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  std::map<std::string, double> m = coordinator::ScrapeGradexSamples((*w)->metrics_port());
  (*w)->Close().IgnoreError();
  return m;
}

TEST(HostilePsSnapshots, FailuresAreCountedAndTheHealthGaugeDrops) {
  const auto m = RunWithSnapshots("snapfail", "/dev/null/snapshots");
  EXPECT_GE(Get(m, "gradex_ps_server_snapshot_failures_total"), 1);
  EXPECT_EQ(Get(m, "gradex_ps_server_snapshot_healthy"), 0);
}

TEST(HostilePsSnapshots, AWritableDirectoryStaysHealthy) {
  char dir[] = "/tmp/gradex-snap-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const auto m = RunWithSnapshots("snapok", dir);
  EXPECT_EQ(Get(m, "gradex_ps_server_snapshot_failures_total"), 0);
  EXPECT_EQ(Get(m, "gradex_ps_server_snapshot_healthy"), 1);
  std::system((std::string("rm -rf ") + dir).c_str());
}

}  // namespace
}  // namespace gradex::client
