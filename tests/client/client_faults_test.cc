// gradex::client::Client when something goes wrong (clients as threads of one
// process, UCX on loopback, and one rank as a process of its own): a wrong
// token, an unreachable coordinator, a client closed mid-run and a killed
// rank fail the survivors clearly within the timeout; a non-finite gradient
// is refused on its own rank without poisoning the peers.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "services/client/client.h"
#include "tests/client/client_harness.h"
#include "tests/client/client_steps.h"

namespace gradex::client {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

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

}  // namespace
}  // namespace gradex::client
