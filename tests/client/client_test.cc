// gradex::Client end to end in one process: clients as threads, rank 0 with
// the embedded coordinator found through an in-memory rendezvous, UCX data
// plane on loopback. Several buckets of different sizes per step and a
// DDP-style rebuild after step 1: results bitwise identical across ranks,
// mass conserved per span over the run; wrong token, unreachable
// coordinator and a client closed mid-run fail clearly within the timeout.
#include "services/client/client.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "prometheus/registry.h"
#include "services/client/client_impl.h"
#include "services/client/saved_state.h"
#include "tests/client/client_steps.h"
#include "tests/client/memory_rendezvous.h"

namespace gradex::client {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::vector<std::unique_ptr<Client>> MakeClients(
    int world, testing::MemoryStore& store,
    const std::function<void(ClientOptions&)>& edit = nullptr) {
  std::vector<std::unique_ptr<Client>> clients(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      ClientOptions o = Options(r, world);
      if (edit) edit(o);
      absl::StatusOr<std::unique_ptr<Client>> c = Client::Create(o, store.rendezvous());
      ASSERT_TRUE(c.ok()) << "rank " << r << ": " << c.status();
      clients[r] = *std::move(c);
    });
  }
  for (auto& t : threads) t.join();
  return clients;
}

// A counter of the client's metrics registry (0 when absent).
double Counter(const Client& c, const std::string& name, const std::string& label = "",
               const std::string& value = "") {
  const auto& impl = dynamic_cast<const ClientImpl&>(c);
  for (const prometheus::MetricFamily& f : impl.metrics().registry()->Collect()) {
    if (f.name != name) continue;
    for (const prometheus::ClientMetric& m : f.metric) {
      bool match = label.empty();
      for (const prometheus::ClientMetric::Label& l : m.label) {
        match |= l.name == label && l.value == value;
      }
      if (match) return m.counter.value;
    }
  }
  return 0;
}

TEST(ClientTest, ThreeRanksRebuiltBucketsIdenticalAndConserved) {
  constexpr int kWorld = 3, kSteps = 8;
  testing::MemoryStore store;
  const std::string timeline = ::testing::TempDir() + "/gradex_client_timeline.json";
  auto clients = MakeClients(kWorld, store, [&](ClientOptions& o) { o.timeline_path = timeline; });
  ASSERT_EQ(clients.size(), 3u);
  for (auto& c : clients) ASSERT_NE(c, nullptr);
  EXPECT_EQ(clients[1]->coordinator(), clients[0]->coordinator());
  std::vector<std::vector<StepResult>> results(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      for (int step = 0; step < kSteps; ++step) {
        const auto t0 = Clock::now();
        results[r].push_back(RunStep(*clients[r], r, step, step == 0 ? kFirstLayout : kRebuilt));
        if (getenv("GRADEX_TEST_VERBOSE") != nullptr) {
          fprintf(stderr, "rank %d step %d: %.1f ms\n", r, step,
                  std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  // Bitwise identical on every rank, every step, every span.
  for (int step = 0; step < kSteps; ++step) {
    for (int r = 0; r < kWorld; ++r) {
      for (const absl::Status& s : results[r][step].statuses) ASSERT_TRUE(s.ok()) << s;
      EXPECT_EQ(results[r][step].spans, results[0][step].spans) << "rank " << r << " step " << step;
    }
  }
  // Conservation per span element over the run: what the ranks gave equals
  // what the results delivered plus what the residuals still hold (exact:
  // integer values).
  std::vector<std::map<uint64_t, std::vector<float>>> residuals(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(clients[r]->Flush().ok());
    absl::StatusOr<std::string> blob = clients[r]->SaveState();
    ASSERT_TRUE(blob.ok()) << blob.status();
    absl::StatusOr<SavedState> s = DecodeState(*blob);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->step, static_cast<uint64_t>(kSteps));
    residuals[r] = s->residuals;
  }
  double nonzero_residual = 0;
  for (uint64_t key = 0; key < kSpanSizes.size(); ++key) {
    std::vector<double> given(kSpanSizes[key], 0.0);
    for (int step = 0; step < kSteps; ++step) {
      for (int r = 0; r < kWorld; ++r) {
        const std::vector<float> g = Grad(key, r, step);
        for (size_t i = 0; i < g.size(); ++i) given[i] += g[i];
      }
    }
    for (size_t i = 0; i < kSpanSizes[key]; ++i) {
      double delivered = 0, kept = 0;
      for (int step = 0; step < kSteps; ++step) delivered += results[0][step].spans.at(key)[i];
      for (int r = 0; r < kWorld; ++r) kept += residuals[r].at(key)[i];
      nonzero_residual += kept != 0;
      ASSERT_EQ(given[i], delivered + kept) << "span " << key << " element " << i;
    }
  }
  EXPECT_GT(nonzero_residual, 0) << "density 0.05 must leave residuals";
  // Stats: the rebuilt layouts ran, a dense probe among them.
  std::vector<BucketStats> stats = clients[0]->Stats();
  EXPECT_EQ(stats.size(), kFirstLayout.size() + kRebuilt.size());
  uint64_t dense = 0;
  for (const BucketStats& b : stats) dense += b.dense_calls;
  EXPECT_EQ(dense, 2 * kRebuilt.size()) << "steps 2 and 5 probe dense";
  EXPECT_EQ(Counter(*clients[0], "gradex_client_dense_probes_total"), 2.0 * kRebuilt.size());
  EXPECT_EQ(Counter(*clients[0], "gradex_client_buckets_total", "outcome", "ok"), 3.0 * kSteps);
  EXPECT_EQ(Counter(*clients[0], "gradex_client_buckets_total", "outcome", "failed"), 0.0);
  EXPECT_EQ(Counter(*clients[0], "gradex_client_algorithm_switches_total", "to", "dense"), 0.0)
      << "probes are not switches";
  for (int r = kWorld - 1; r >= 0; --r) {  // rank 0, the coordinator's, last
    Client* c = clients[r].get();
    const auto t0 = Clock::now();
    absl::Status s = c->Close();
    EXPECT_TRUE(s.ok()) << s;
    if (getenv("GRADEX_TEST_VERBOSE") != nullptr) {
      fprintf(stderr, "close: %.1f ms\n",
              std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
  }
  // The timeline of rank 0 parses as JSON and holds 6 events per bucket
  // (queue, selection, wait, exchange, communication, reduction).
  const std::string path0 = ::testing::TempDir() + "/gradex_client_timeline.rank0.json";
  const std::string cmd = absl::StrCat(
      "python3 -c \"import json,sys; e=json.load(open('", path0,
      "')); sys.exit(0 if sum(1 for x in e if x.get('ph')=='X')==", 6 * 3 * kSteps, " else 1)\"");
  if (std::system("python3 -c 'import json' 2>/dev/null") == 0) {
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
}

TEST(ClientTest, WrongTokenIsAClearErrorWithinTheTimeout) {
  testing::MemoryStore store;
  ClientOptions o0 = Options(0, 2);
  o0.token = "right-token";
  absl::StatusOr<std::unique_ptr<Client>> c0 = Client::Create(o0, store.rendezvous());
  ASSERT_TRUE(c0.ok()) << c0.status();
  ClientOptions o1 = Options(1, 2);
  o1.coordinator = (*c0)->coordinator();
  o1.token = "wrong-token";
  o1.timeout = milliseconds(5000);
  const auto t0 = Clock::now();
  absl::StatusOr<std::unique_ptr<Client>> c1 = Client::Create(o1);
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_FALSE(c1.ok());
  EXPECT_EQ(c1.status().code(), absl::StatusCode::kUnauthenticated) << c1.status();
  EXPECT_NE(c1.status().message().find(o1.coordinator), std::string::npos) << c1.status();
  EXPECT_LT(took, 5.0);
}

TEST(ClientTest, UnreachableCoordinatorIsAClearErrorWithinTheTimeout) {
  ClientOptions o = Options(1, 2);
  o.coordinator = "127.0.0.1:1";  // nothing listens there
  o.token = "t";
  o.timeout = milliseconds(2000);
  const auto t0 = Clock::now();
  absl::StatusOr<std::unique_ptr<Client>> c = Client::Create(o);
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(c.status().code() == absl::StatusCode::kUnavailable ||
              c.status().code() == absl::StatusCode::kDeadlineExceeded)
      << c.status();
  EXPECT_NE(c.status().message().find("127.0.0.1:1"), std::string::npos) << c.status();
  EXPECT_LT(took, 3.0) << "the timeout is 2 s";
  // No rendezvous for a rank that must find rank 0's coordinator: at once.
  o.coordinator.clear();
  EXPECT_EQ(Client::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ClientTest, AClientClosedMidRunFailsTheSurvivorsWithinTheTimeout) {
  constexpr int kWorld = 3;
  testing::MemoryStore store;
  auto clients =
      MakeClients(kWorld, store, [](ClientOptions& o) { o.timeout = milliseconds(4000); });
  for (auto& c : clients) ASSERT_NE(c, nullptr);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      for (int step = 0; step < 2; ++step) {
        for (const absl::Status& s : RunStep(*clients[r], r, step, kRebuilt).statuses) {
          EXPECT_TRUE(s.ok()) << s;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(clients[2]->Close().ok());
  // The survivors' next step: every bucket fails, clearly, in time.
  threads.clear();
  std::vector<double> took(2);
  std::vector<StepResult> after(2);
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      const auto t0 = Clock::now();
      after[r] = RunStep(*clients[r], r, 2, kRebuilt);
      took[r] = std::chrono::duration<double>(Clock::now() - t0).count();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_LT(took[r], 4.0 + 1.0) << "rank " << r;
    for (const absl::Status& s : after[r].statuses) {
      EXPECT_FALSE(s.ok()) << "rank " << r;
      EXPECT_NE(s.message().find("step 2"), std::string::npos) << s;
    }
    // Nothing hangs: Flush and Close return.
    EXPECT_TRUE(clients[r]->Flush().ok());
  }
  const auto t0 = Clock::now();
  for (int r = 1; r >= 0; --r) (void)clients[r]->Close();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 10.0);
  // Closed: a new bucket fails at once.
  std::vector<float> x(4, 1.0f);
  EXPECT_EQ(clients[0]->AllreduceAsync(9, x).get().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ClientTest, SaveLoadRoundTripAndCorruptBlobRefused) {
  testing::MemoryStore store;
  ClientOptions o = Options(0, 1);
  o.density = 0.1;
  o.dense_probe_period = 0;
  absl::StatusOr<std::unique_ptr<Client>> a = Client::Create(o, store.rendezvous());
  ASSERT_TRUE(a.ok()) << a.status();
  for (int step = 0; step < 3; ++step) {
    for (const absl::Status& s : RunStep(**a, 0, step, kRebuilt).statuses) ASSERT_TRUE(s.ok()) << s;
  }
  absl::StatusOr<std::string> blob = (*a)->SaveState();
  ASSERT_TRUE(blob.ok()) << blob.status();
  ASSERT_TRUE(DecodeState(*blob).ok());
  EXPECT_EQ(DecodeState(*blob)->step, 3u);
  EXPECT_EQ(DecodeState(*blob)->residuals.size(), kSpanSizes.size());
  ASSERT_TRUE((*a)->Close().ok());

  testing::MemoryStore store2;
  absl::StatusOr<std::unique_ptr<Client>> b = Client::Create(o, store2.rendezvous());
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE((*b)->LoadState(*blob).ok());
  EXPECT_EQ((*b)->step(), 3u);
  EXPECT_EQ(*(*b)->SaveState(), *blob);
  std::string bad = *blob;
  bad[bad.size() / 2] ^= 1;
  absl::Status s = (*b)->LoadState(bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ((*b)->LoadState(blob->substr(0, 30)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*b)->LoadState("not a state").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*(*b)->SaveState(), *blob) << "a refused blob changes nothing";
  // The loaded residuals are used: the next step runs from step 3.
  for (const absl::Status& st : RunStep(**b, 0, 3, kRebuilt).statuses) EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ((*b)->step(), 4u);
}

TEST(ClientTest, BadBucketsAreRefusedClearly) {
  testing::MemoryStore store;
  absl::StatusOr<std::unique_ptr<Client>> c = Client::Create(Options(0, 1), store.rendezvous());
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<float> x(10, 1.0f);
  auto run = [&](std::vector<ParamSpan> spans, Memory m) {
    auto p = std::make_shared<std::promise<absl::Status>>();
    (*c)->AllreduceAsync(spans, x, m, true, [p](absl::Status s) { p->set_value(s); });
    return p->get_future().get();
  };
  EXPECT_EQ(run({{1, 9}}, Memory::kHost).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(run({{1, 5}, {1, 5}}, Memory::kHost).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(run({}, Memory::kHost).code(), absl::StatusCode::kInvalidArgument);
  // Host memory passed as device memory: refused (no CUDA build, or not a
  // device pointer), the data untouched.
  absl::Status d = run({{1, 10}}, Memory::kDevice);
  EXPECT_TRUE(d.code() == absl::StatusCode::kUnimplemented ||
              d.code() == absl::StatusCode::kInvalidArgument)
      << d;
  EXPECT_EQ(x, std::vector<float>(10, 1.0f));
  EXPECT_TRUE(run({{1, 10}}, Memory::kHost).ok());
  // Flush and Close from a done callback would wait for their own thread.
  auto p = std::make_shared<std::promise<std::pair<absl::Status, absl::Status>>>();
  Client* raw = c->get();
  raw->AllreduceAsync({{1, 10}}, x, Memory::kHost, true, [p, raw](absl::Status) {
    p->set_value({raw->Flush(), raw->Close()});
  });
  auto [flush, close] = p->get_future().get();
  EXPECT_EQ(flush.code(), absl::StatusCode::kFailedPrecondition) << flush;
  EXPECT_EQ(close.code(), absl::StatusCode::kFailedPrecondition) << close;
  // Options are checked before anything starts.
  ClientOptions o = Options(0, 1);
  o.algorithm = "nope";
  EXPECT_EQ(Client::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options(2, 2);
  EXPECT_EQ(Client::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options(0, 1);
  o.density = 0;
  EXPECT_EQ(Client::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

// A rank killed (SIGKILL, a process of its own) while the others wait for
// it in a step: every survivor's bucket fails with a clear error within the
// timeout, and nothing hangs.
TEST(ClientTest, AKilledRankFailsTheSurvivorsWithinTheTimeout) {
  constexpr int kWorld = 3, kStall = 3;
  constexpr auto kTimeout = milliseconds(5000);
  testing::MemoryStore store;
  std::vector<std::unique_ptr<Client>> clients(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      ClientOptions o = Options(r, kWorld);
      o.timeout = kTimeout;
      absl::StatusOr<std::unique_ptr<Client>> c = Client::Create(o, store.rendezvous());
      ASSERT_TRUE(c.ok()) << c.status();
      clients[r] = *std::move(c);
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_NE(clients[0], nullptr);
  ASSERT_NE(clients[1], nullptr);
  // Rank 2: a process of its own, told where the coordinator is as a
  // Kubernetes job would be (GRADEX_COORDINATOR, GRADEX_TOKEN).
  const std::string out = ::testing::TempDir() + "/gradex_client_rank2.out";
  std::vector<std::string> env = {"GRADEX_COORDINATOR=" + clients[0]->coordinator(),
                                  "GRADEX_TOKEN=" + *store.rendezvous().get("gradex/token"),
                                  "RANK=2", "WORLD_SIZE=3", "PATH=/usr/bin:/bin"};
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string bin = GRADEX_CLIENT_RANK_BIN, steps = "--steps", n = "100", stall = "--stall-at",
              k = std::to_string(kStall);
  char* argv[] = {bin.data(), steps.data(), n.data(), stall.data(), k.data(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t child = -1;
  ASSERT_EQ(posix_spawn(&child, bin.c_str(), &actions, nullptr, argv, envp.data()), 0);
  posix_spawn_file_actions_destroy(&actions);
  std::vector<StepResult> before(2 * kStall), stalled(2);
  std::vector<Clock::time_point> ended(2);
  threads.clear();
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      for (int step = 0; step < kStall; ++step) {
        before[r * kStall + step] = RunStep(*clients[r], r, step, kRebuilt);
      }
      stalled[r] = RunStep(*clients[r], r, kStall, kRebuilt);
      ended[r] = Clock::now();
    });
  }
  // Kill rank 2 once it stalls before step kStall (the survivors wait in it).
  for (int i = 0; i < 400; ++i) {
    std::ifstream f(out);
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (text.find("stalled") != std::string::npos) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  std::this_thread::sleep_for(milliseconds(300));
  const Clock::time_point kill_time = Clock::now();
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  for (auto& t : threads) t.join();
  for (const StepResult& r : before) {
    for (const absl::Status& s : r.statuses) EXPECT_TRUE(s.ok()) << s;
  }
  for (int r = 0; r < 2; ++r) {
    const double took = std::chrono::duration<double>(ended[r] - kill_time).count();
    EXPECT_LT(took, std::chrono::duration<double>(kTimeout).count() + 1.0) << "rank " << r;
    EXPECT_GT(took, 0.0) << "rank " << r << " waited for the stalled rank until it was killed";
    for (const absl::Status& s : stalled[r].statuses) {
      EXPECT_FALSE(s.ok()) << "rank " << r;
      EXPECT_NE(s.message().find(absl::StrCat("step ", kStall)), std::string::npos) << s;
    }
  }
  const auto t0 = Clock::now();
  for (int r = 1; r >= 0; --r) (void)clients[r]->Close();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 10.0);
}

TEST(ClientTest, NonFiniteGradientIsRefusedWithoutPoisoningPeers) {
  testing::MemoryStore store;
  auto clients = MakeClients(2, store);
  for (auto& c : clients) ASSERT_NE(c, nullptr);
  std::vector<std::vector<StepResult>> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      for (int step = 0; step < 3; ++step) {
        std::vector<std::vector<float>> data(kRebuilt.size());
        std::vector<std::future<absl::Status>> done;
        for (size_t b = 0; b < kRebuilt.size(); ++b) {
          std::vector<ParamSpan> spans;
          for (uint64_t key : kRebuilt[b]) {
            std::vector<float> g = Grad(key, r, step);
            data[b].insert(data[b].end(), g.begin(), g.end());
            spans.push_back({key, kSpanSizes[key]});
          }
          if (r == 1 && step == 1 && b == 1) {  // span 4 (3 elements), then span 3
            data[b][5] = std::nanf("");
            data[b][900] = -INFINITY;
          }
          auto p = std::make_shared<std::promise<absl::Status>>();
          done.push_back(p->get_future());
          clients[r]->AllreduceAsync(spans, data[b], Memory::kHost, b + 1 == kRebuilt.size(),
                                     [p](absl::Status s) { p->set_value(s); });
        }
        StepResult res;
        for (size_t b = 0; b < kRebuilt.size(); ++b) {
          res.statuses.push_back(done[b].get());
          res.spans[b].assign(data[b].begin(), data[b].end());
        }
        results[r].push_back(std::move(res));
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int step = 0; step < 3; ++step) {
    for (size_t b = 0; b < kRebuilt.size(); ++b) {
      EXPECT_EQ(results[0][step].spans[b], results[1][step].spans[b]) << step << " " << b;
      for (float v : results[0][step].spans[b]) ASSERT_TRUE(std::isfinite(v)) << step;
      EXPECT_TRUE(results[0][step].statuses[b].ok()) << results[0][step].statuses[b];
      const absl::Status& s = results[1][step].statuses[b];
      if (step == 1 && b == 1) {
        EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
        EXPECT_NE(s.message().find("2 NaN or infinite values (first: span 3 element 2)"),
                  std::string::npos)
            << s;
      } else {
        EXPECT_TRUE(s.ok()) << s;
      }
    }
  }
  EXPECT_EQ(Counter(*clients[1], "gradex_client_nonfinite_values_total"), 2.0);
  EXPECT_EQ(Counter(*clients[0], "gradex_client_nonfinite_values_total"), 0.0);
  for (int r = 1; r >= 0; --r) (void)clients[r]->Close();
}

TEST(ClientTest, StartIterRunsDenseThenSwitchesOnceCountedAndLogged) {
  testing::MemoryStore store;
  ClientOptions o = Options(0, 1);
  o.start_iter = 2;
  o.dense_probe_period = 0;
  absl::StatusOr<std::unique_ptr<Client>> c = Client::Create(o, store.rendezvous());
  ASSERT_TRUE(c.ok()) << c.status();
  for (int step = 0; step < 4; ++step) {
    std::vector<float> x = Grad(0, 0, step);
    ASSERT_TRUE((*c)->AllreduceAsync(0, x).get().ok());
    std::vector<BucketStats> stats = (*c)->Stats();
    ASSERT_EQ(stats.size(), 1u);
    EXPECT_EQ(stats[0].algorithm, step < 2 ? "dense-ring" : "spardl") << step;
  }
  const BucketStats b = (*c)->Stats()[0];
  EXPECT_EQ(b.calls, 4u);
  EXPECT_EQ(b.dense_calls, 2u);
  EXPECT_EQ(b.fallback_switches, 1u);
  EXPECT_GT(b.dense_s, 0.0);
  EXPECT_GT(b.sparse_s, 0.0);
  EXPECT_GT(b.residual_norm, 0.0);
  EXPECT_EQ(Counter(**c, "gradex_client_algorithm_switches_total", "to", "sparse"), 1.0);
  EXPECT_EQ(Counter(**c, "gradex_client_algorithm_switches_total", "to", "dense"), 0.0);
}

}  // namespace
}  // namespace gradex::client
