// PsWorker's own metrics (ps/ps_worker_metrics.h), scraped from
// each worker's /metrics over HTTP as Prometheus would: the counters equal
// the worker's Stats() exactly, the staleness histogram counts every step
// (and its buckets bound the staleness seen), failed steps are counted by
// reason. Workers are threads of this test; rank 0 embeds the coordinator
// and hosts the server shard (real gRPC and UCX on loopback).
#include "ps/ps_worker_metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/str_join.h"
#include "ps/ps_worker.h"
#include "tests/client/memory_rendezvous.h"
#include "tests/coordinator/client_util.h"

namespace gradex::client {
namespace {

ps::PsWorkerOptions Options(int rank, int world, const std::string& job,
                            std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  ps::PsWorkerOptions o;
  o.client.job = job;
  o.client.rank = rank;
  o.client.world_size = world;
  o.client.timeout = timeout;
  o.client.metrics_port = 0;  // any free port: PsWorker::metrics_port() says which
  o.layer_sizes = {100, 37};
  o.density = 0.1f;
  return o;
}

double Get(const std::map<std::string, double>& m, const std::string& key) {
  auto it = m.find(key);
  EXPECT_NE(it, m.end()) << "no sample " << key;
  return it == m.end() ? -1 : it->second;
}

// Sum of gradex_ps_worker_failed_steps_total over reasons; every reason's
// child is there from the start.
double Failed(const std::map<std::string, double>& m) {
  double sum = 0;
  for (int i = 0; i < static_cast<int>(ps::PsFailure::kCount); ++i) {
    sum += Get(m, "gradex_ps_worker_failed_steps_total{reason=\"" +
                      std::string(ps::PsFailureName(static_cast<ps::PsFailure>(i))) + "\"}");
  }
  return sum;
}

// The counters equal Stats(); `steps` ok and `failed` failed steps were run;
// `staleness` holds each ok step's Stats().staleness, read right after it.
void ExpectMatchesStats(const std::map<std::string, double>& m, const ps::PsWorkerStats& s,
                        uint64_t steps, uint64_t failed, const std::vector<uint64_t>& staleness,
                        int rank) {
  SCOPED_TRACE(rank);
  EXPECT_EQ(s.steps, steps);
  EXPECT_EQ(s.failed_steps, failed);
  EXPECT_EQ(Get(m, "gradex_ps_worker_steps_total"), steps);
  EXPECT_EQ(Failed(m), failed);
  EXPECT_EQ(Get(m, "gradex_ps_worker_sent_bytes_total"), s.sent_bytes);
  EXPECT_EQ(Get(m, "gradex_ps_worker_received_bytes_total"), s.recv_bytes);
  EXPECT_EQ(Get(m, "gradex_ps_worker_pushed_entries_total"), s.pushed_entries);
  EXPECT_EQ(Get(m, "gradex_ps_worker_pulled_entries_total"), s.pulled_entries);
  EXPECT_EQ(Get(m, "gradex_ps_worker_full_syncs_total"), s.full_syncs);
  EXPECT_EQ(Get(m, "gradex_ps_worker_epoch_changes_total"), s.epochs_entered);
  EXPECT_EQ(Get(m, "gradex_ps_worker_epoch"), s.epoch);
  EXPECT_EQ(Get(m, "gradex_ps_worker_version"), s.version);
  EXPECT_EQ(Get(m, "gradex_ps_worker_last_staleness_versions"), s.staleness);
  EXPECT_EQ(Get(m, "gradex_ps_worker_step_duration_seconds_count"), steps + failed);
  // One staleness sample per successful step, each the step's own.
  ASSERT_EQ(staleness.size(), steps);
  EXPECT_EQ(Get(m, "gradex_ps_worker_staleness_versions_count"), steps);
  uint64_t sum = 0;
  for (uint64_t v : staleness) sum += v;
  EXPECT_EQ(Get(m, "gradex_ps_worker_staleness_versions_sum"), sum);
  EXPECT_EQ(*std::max_element(staleness.begin(), staleness.end()), s.max_staleness_seen);
  const std::string bucket = "gradex_ps_worker_staleness_versions_bucket{le=\"";
  int buckets = 0;
  for (auto it = m.lower_bound(bucket); it != m.end() && it->first.rfind(bucket, 0) == 0; ++it) {
    ++buckets;
    const std::string le = it->first.substr(bucket.size());
    const double bound = le.rfind("+Inf", 0) == 0 ? 1e300 : std::strtod(le.c_str(), nullptr);
    EXPECT_EQ(it->second, std::count_if(staleness.begin(), staleness.end(),
                                        [&](uint64_t v) { return v <= bound; }))
        << it->first;
  }
  EXPECT_EQ(buckets, 12);  // 11 bounds and +Inf
}

TEST(PsWorkerMetricsTest, CountersEqualStatsAndTheHistogramCountsEveryStep) {
  constexpr int kWorld = 3, kSteps = 12;
  testing::MemoryStore store;
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      ps::PsWorkerOptions o = Options(r, kWorld, "metrics");
      o.max_staleness = 4;
      auto w = ps::PsWorker::Create(o, store.rendezvous());
      ASSERT_TRUE(w.ok()) << w.status();
      ASSERT_GT((*w)->metrics_port(), 0);
      std::vector<float> p(137, 0.f), g(137);
      std::vector<uint64_t> staleness;
      for (int s = 0; s < kSteps; ++s) {
        for (size_t i = 0; i < g.size(); ++i) g[i] = p[i] - 0.1f * static_cast<float>(r + 1);
        ASSERT_TRUE((*w)->Step(g, p, 0.05f).ok()) << r;
        staleness.push_back((*w)->Stats().staleness);
      }
      const auto m = coordinator::ScrapeGradexSamples((*w)->metrics_port());
      const ps::PsWorkerStats s = (*w)->Stats();
      ExpectMatchesStats(m, s, kSteps, 0, staleness, r);
      if (r == 0)
        std::printf("rank 0 staleness per step: %s\n", absl::StrJoin(staleness, " ").c_str());
      EXPECT_EQ(Get(m, "gradex_ps_worker_staleness_bound_versions"), 4);
      EXPECT_LE(s.max_staleness_seen, 4u);
      EXPECT_GE(s.full_syncs, 1u);  // the join
      EXPECT_GT(s.sent_bytes, 0u);
      // Rank 0 hosts the shard: its process serves the server's metrics too.
      EXPECT_EQ(m.count("gradex_ps_server_pushes_total") == 1, r == 0);
      EXPECT_TRUE((*w)->Close().ok());
    });
  }
  for (auto& t : threads) t.join();
}

// Steps that fail are counted once each by their reason, with their time;
// a NaN gradient is the worker's own input (the shard never sees it), and
// the steps after it succeed.
TEST(PsWorkerMetricsTest, FailedStepsAreCountedByReason) {
  auto w = ps::PsWorker::Create(Options(0, 1, "nan"));
  ASSERT_TRUE(w.ok()) << w.status();
  std::vector<float> p(137, 0.f), g(137, 0.5f);
  std::vector<uint64_t> staleness;
  auto ok_step = [&] {
    ASSERT_TRUE((*w)->Step(g, p, 0.05f).ok());
    staleness.push_back((*w)->Stats().staleness);
  };
  for (int s = 0; s < 3; ++s) ok_step();
  g[40] = std::nanf("");
  for (int s = 0; s < 2; ++s) {
    absl::Status st = (*w)->Step(g, p, 0.05f);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  }
  g[40] = 0.5f;
  for (int s = 0; s < 2; ++s) ok_step();
  const auto m = coordinator::ScrapeGradexSamples((*w)->metrics_port());
  ExpectMatchesStats(m, (*w)->Stats(), 5, 2, staleness, 0);
  EXPECT_EQ(Get(m, "gradex_ps_worker_failed_steps_total{reason=\"invalid_input\"}"), 2);
  EXPECT_EQ(Get(m, "gradex_ps_worker_staleness_bound_versions"), 0);  // unbounded
  EXPECT_TRUE((*w)->Close().ok());
}

TEST(PsWorkerMetricsTest, ExchangeErrorsAreClassifiedByCode) {
  EXPECT_EQ(ps::ClassifyExchangeError(absl::DeadlineExceededError("")), ps::PsFailure::kTimeout);
  EXPECT_EQ(ps::ClassifyExchangeError(absl::UnavailableError("")), ps::PsFailure::kUnavailable);
  EXPECT_EQ(ps::ClassifyExchangeError(absl::FailedPreconditionError("")), ps::PsFailure::kRefused);
  EXPECT_EQ(ps::ClassifyExchangeError(absl::DataLossError("")), ps::PsFailure::kInvalidReply);
  EXPECT_EQ(ps::ClassifyExchangeError(absl::InvalidArgumentError("")),
            ps::PsFailure::kInvalidInput);
  EXPECT_EQ(ps::ClassifyExchangeError(absl::InternalError("")), ps::PsFailure::kOther);
  std::set<std::string_view> names;
  for (int i = 0; i < static_cast<int>(ps::PsFailure::kCount); ++i) {
    names.insert(ps::PsFailureName(static_cast<ps::PsFailure>(i)));
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(ps::PsFailure::kCount));  // distinct labels
}

}  // namespace
}  // namespace gradex::client
