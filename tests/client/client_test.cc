// gradex::Client end to end in one process: clients as threads, rank 0 with
// the embedded coordinator found through an in-memory rendezvous, UCX data
// plane on loopback. Several buckets of different sizes per step and a
// DDP-style rebuild after step 1: results bitwise identical across ranks,
// mass conserved per span over the run; wrong token, unreachable
// coordinator and a client closed mid-run fail clearly within the timeout.
#include "services/client/client.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "services/client/saved_state.h"
#include "tests/client/memory_rendezvous.h"
#include "tests/collectives/harness.h"

namespace gradex::client {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

const std::vector<size_t> kSpanSizes = {1000, 37, 500, 2048, 3, 800};
// DDP issues buckets in reverse parameter order; after the first iteration
// it rebuilds them in the order gradients became ready.
const std::vector<std::vector<uint64_t>> kFirstLayout = {{5, 4}, {3, 2}, {1, 0}};
const std::vector<std::vector<uint64_t>> kRebuilt = {{5}, {4, 3}, {2, 1, 0}};

ClientOptions Options(int rank, int world) {
  ClientOptions o;
  o.job = "client-test";
  o.rank = rank;
  o.world_size = world;
  o.algorithm = "spardl";
  o.density = 0.05;
  o.min_compression_rate = 0;  // small buckets stay sparse: residuals to conserve
  o.dense_probe_period = 3;    // steps 2 and 5 run dense
  o.mean = false;
  o.timeout = milliseconds(20000);
  return o;
}

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

// The gradient of span `key` on `rank` at `step`: small integers.
std::vector<float> Grad(uint64_t key, int rank, int step) {
  return gradex::testing::MakeGradient(100 + key, rank, step, kSpanSizes[key],
                                       gradex::testing::Values::kIntegers);
}

// One step on one client: every bucket of `layout` queued at once, the last
// one ending the step; returns each span's result and each bucket's status.
struct StepResult {
  std::map<uint64_t, std::vector<float>> spans;
  std::vector<absl::Status> statuses;
};

StepResult RunStep(Client& c, int rank, int step,
                   const std::vector<std::vector<uint64_t>>& layout) {
  std::vector<std::vector<float>> data(layout.size());
  std::vector<std::future<absl::Status>> done;
  for (size_t b = 0; b < layout.size(); ++b) {
    std::vector<ParamSpan> spans;
    for (uint64_t key : layout[b]) {
      std::vector<float> g = Grad(key, rank, step);
      data[b].insert(data[b].end(), g.begin(), g.end());
      spans.push_back({key, kSpanSizes[key]});
    }
    auto p = std::make_shared<std::promise<absl::Status>>();
    done.push_back(p->get_future());
    c.AllreduceAsync(spans, data[b], Memory::kHost, b + 1 == layout.size(),
                     [p](absl::Status s) { p->set_value(s); });
  }
  StepResult r;
  for (size_t b = 0; b < layout.size(); ++b) {
    r.statuses.push_back(done[b].get());
    size_t at = 0;
    for (uint64_t key : layout[b]) {
      r.spans[key].assign(data[b].begin() + at, data[b].begin() + at + kSpanSizes[key]);
      at += kSpanSizes[key];
    }
  }
  return r;
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
        results[r].push_back(RunStep(*clients[r], r, step, step == 0 ? kFirstLayout : kRebuilt));
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
    for (size_t i = 0; i < kSpanSizes[key]; ++i) {
      double given = 0, delivered = 0, kept = 0;
      for (int step = 0; step < kSteps; ++step) {
        for (int r = 0; r < kWorld; ++r) given += Grad(key, r, step)[i];
        delivered += results[0][step].spans.at(key)[i];
      }
      for (int r = 0; r < kWorld; ++r) kept += residuals[r].at(key)[i];
      nonzero_residual += kept != 0;
      ASSERT_EQ(given, delivered + kept) << "span " << key << " element " << i;
    }
  }
  EXPECT_GT(nonzero_residual, 0) << "density 0.05 must leave residuals";
  // Stats: the rebuilt layouts ran, a dense probe among them.
  std::vector<BucketStats> stats = clients[0]->Stats();
  EXPECT_EQ(stats.size(), kFirstLayout.size() + kRebuilt.size());
  uint64_t dense = 0;
  for (const BucketStats& b : stats) dense += b.dense_calls;
  EXPECT_EQ(dense, 2 * kRebuilt.size()) << "steps 2 and 5 probe dense";
  for (auto& c : clients) {
    absl::Status s = c->Close();
    EXPECT_TRUE(s.ok()) << s;
  }
  // The timeline of rank 0 parses as JSON and holds 4 events per bucket.
  const std::string path0 = ::testing::TempDir() + "/gradex_client_timeline.rank0.json";
  const std::string cmd = absl::StrCat(
      "python3 -c \"import json,sys; e=json.load(open('", path0,
      "')); sys.exit(0 if sum(1 for x in e if x.get('ph')=='X')==", 4 * 3 * kSteps, " else 1)\"");
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

}  // namespace
}  // namespace gradex::client
