// The client's pipeline: bucket b+1's selection (the call's local part, on
// the selection thread) overlaps bucket b's exchange (the progress thread).
// - test-overlap, an algorithm whose exchange of bucket b waits until bucket
//   b+1's local part has started on the same rank: every bucket succeeds
//   with the pipeline, and the same steps time out without it (so the
//   overlap really happens; no timing threshold is involved). The timeline
//   shows each selection of b+1 inside the exchange of b.
// - spardl with rebuilt layouts: the same bits with the pipeline on and off,
//   on every rank, and exact conservation.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "catalog/catalog.h"
#include "services/client/client.h"
#include "services/client/saved_state.h"
#include "tests/client/client_steps.h"
#include "tests/client/memory_rendezvous.h"
#include "tests/collectives/test_dense_gather.h"

namespace gradex::client {
namespace {

using std::chrono::milliseconds;

constexpr char kOverlap[] = "test-overlap";
constexpr int kBuckets = 3;               // per step, in the overlap tests
constexpr milliseconds kWaitBound(1500);  // how long an exchange waits for the next selection

GRADEX_CATALOG_ENTRY({.id = 60031,
                      .name = kOverlap,
                      .description = "test only: exchange of bucket b waits for b+1's selection",
                      .traits = {.dense = true}});

// (epoch rank, call id) of every local part that has started.
std::mutex g_mu;
std::condition_variable g_cv;
std::set<std::pair<int, uint64_t>> g_started;

class OverlapProbe final : public gradex::testing::TestDenseGather {
 public:
  OverlapProbe() : TestDenseGather(kOverlap) {}

 protected:
  absl::Status LocalSelection(const collectives::CallContext& ctx,
                              const collectives::AllreduceOptions&, collectives::LocalInput&,
                              collectives::ResidualLedger&, collectives::CallStats*) override {
    std::lock_guard<std::mutex> lock(g_mu);
    g_started.insert({ctx.transport->rank(), ctx.call_id});
    g_cv.notify_all();
    return absl::OkStatus();
  }
  absl::Status ReduceDense(const collectives::CallContext& ctx, float* data, size_t n,
                           collectives::PhaseTimes* times) override {
    if (static_cast<int>(ctx.bucket_index) + 1 < kBuckets) {
      const std::pair<int, uint64_t> next{ctx.transport->rank(), ctx.call_id + 1};
      std::unique_lock<std::mutex> lock(g_mu);
      if (!g_cv.wait_for(lock, kWaitBound, [&] { return g_started.count(next) > 0; })) {
        return absl::DeadlineExceededError(absl::StrCat("bucket ", ctx.bucket_index + 1,
                                                        "'s selection did not start during bucket ",
                                                        ctx.bucket_index, "'s exchange"));
      }
    }
    return TestDenseGather::ReduceDense(ctx, data, n, times);
  }
};

GRADEX_REGISTER_ALGORITHM(kOverlap, [] { return std::make_unique<OverlapProbe>(); });

std::vector<std::unique_ptr<Client>> MakeClients(int world, testing::MemoryStore& store,
                                                 const std::function<void(ClientOptions&)>& edit) {
  std::vector<std::unique_ptr<Client>> clients(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      ClientOptions o = Options(r, world);
      edit(o);
      absl::StatusOr<std::unique_ptr<Client>> c = Client::Create(o, store.rendezvous());
      ASSERT_TRUE(c.ok()) << "rank " << r << ": " << c.status();
      clients[r] = *std::move(c);
    });
  }
  for (auto& t : threads) t.join();
  return clients;
}

// `steps` steps of three one-span buckets on every client; statuses[rank][step][bucket].
std::vector<std::vector<std::vector<absl::Status>>> RunOverlapSteps(
    std::vector<std::unique_ptr<Client>>& clients, int steps) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_started.clear();  // call ids start again with each job
  }
  const std::vector<std::vector<uint64_t>> layout = {{0}, {1}, {3}};
  std::vector<std::vector<std::vector<absl::Status>>> out(clients.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < clients.size(); ++r) {
    threads.emplace_back([&, r] {
      for (int step = 0; step < steps; ++step) {
        StepResult s = RunStep(*clients[r], static_cast<int>(r), step, layout);
        out[r].push_back(s.statuses);
        // Every result is the exact sum (integer gradients, dense gather).
        for (size_t b = 0; b < layout.size() && s.statuses[b].ok(); ++b) {
          const uint64_t key = layout[b][0];
          for (size_t i = 0; i < kSpanSizes[key]; ++i) {
            float want = 0;
            for (size_t q = 0; q < clients.size(); ++q) {
              want += Grad(key, static_cast<int>(q), step)[i];
            }
            ASSERT_EQ(s.spans[key][i], want) << "rank " << r << " step " << step << " key " << key;
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST(ClientPipelineTest, SelectionOfTheNextBucketRunsDuringTheExchange) {
  constexpr int kWorld = 2, kSteps = 4;
  testing::MemoryStore store;
  const std::string timeline = ::testing::TempDir() + "/gradex_pipeline_timeline.json";
  auto clients = MakeClients(kWorld, store, [&](ClientOptions& o) {
    o.algorithm = kOverlap;
    o.dense_probe_period = 0;  // every bucket of every step runs test-overlap
    o.timeline_path = timeline;
  });
  for (auto& c : clients) ASSERT_NE(c, nullptr);
  auto statuses = RunOverlapSteps(clients, kSteps);
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_EQ(statuses[r].size(), static_cast<size_t>(kSteps));
    for (int step = 0; step < kSteps; ++step) {
      for (const absl::Status& s : statuses[r][step]) {
        ASSERT_TRUE(s.ok()) << "rank " << r << " step " << step << ": " << s;
      }
    }
  }
  for (int r = kWorld - 1; r >= 0; --r) EXPECT_TRUE(clients[r]->Close().ok());
  // Rank 0's timeline: every step's selection of bucket b+1 (selection
  // thread) starts inside the exchange of bucket b (progress thread).
  const std::string path0 = ::testing::TempDir() + "/gradex_pipeline_timeline.rank0.json";
  const std::string check = absl::StrCat(
      "python3 -c \"import json,sys\n"
      "e=[x for x in json.load(open('",
      path0,
      "')) if x.get('ph')=='X']\n"
      "ev=lambda n,s,b:[x for x in e if x['name']==n and x['args']['step']==s and "
      "x['args']['bucket']==b]\n"
      "steps=sorted({x['args']['step'] for x in e})\n"
      "assert len(steps)==",
      kSteps,
      ", steps\n"
      "for s in steps:\n"
      "  for b in range(",
      kBuckets - 1,
      "):\n"
      "    (x,),(y,)=ev('exchange',s,b),ev('selection',s,b+1)\n"
      "    assert x['tid']==0 and y['tid']==1\n"
      "    assert x['ts']<=y['ts']<=x['ts']+x['dur']+1,(s,b,x,y)\n\"");
  if (std::system("python3 -c 'import json' 2>/dev/null") == 0) {
    EXPECT_EQ(std::system(check.c_str()), 0) << check;
  }
}

TEST(ClientPipelineTest, WithoutThePipelineTheSameExchangeTimesOut) {
  constexpr int kWorld = 2;
  testing::MemoryStore store;
  auto clients = MakeClients(kWorld, store, [](ClientOptions& o) {
    o.algorithm = kOverlap;
    o.dense_probe_period = 0;
    o.pipeline = false;
  });
  for (auto& c : clients) ASSERT_NE(c, nullptr);
  auto statuses = RunOverlapSteps(clients, 1);
  for (int r = 0; r < kWorld; ++r) {
    const absl::Status& first = statuses[r][0][0];
    EXPECT_EQ(first.code(), absl::StatusCode::kDeadlineExceeded) << "rank " << r << ": " << first;
    EXPECT_NE(first.message().find("did not start during bucket 0's exchange"), std::string::npos)
        << first;
    for (const absl::Status& s : statuses[r][0]) EXPECT_FALSE(s.ok());
  }
  for (int r = kWorld - 1; r >= 0; --r) (void)clients[r]->Close();
}

// spardl over rebuilt layouts, pipeline on and off: per step and span the
// same bits on every rank and in both modes; per span element, what the
// ranks gave equals what the results delivered plus the residuals (exact).
TEST(ClientPipelineTest, OnAndOffGiveTheSameBitsAndConserve) {
  constexpr int kWorld = 3, kSteps = 6;
  std::vector<std::vector<std::vector<StepResult>>> runs;  // [mode][rank][step]
  std::vector<std::vector<std::map<uint64_t, std::vector<float>>>> residuals;
  for (bool pipeline : {true, false}) {
    testing::MemoryStore store;
    auto clients = MakeClients(kWorld, store, [&](ClientOptions& o) { o.pipeline = pipeline; });
    for (auto& c : clients) ASSERT_NE(c, nullptr);
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
    std::vector<std::map<uint64_t, std::vector<float>>> kept(kWorld);
    for (int r = 0; r < kWorld; ++r) {
      absl::StatusOr<std::string> blob = clients[r]->SaveState();
      ASSERT_TRUE(blob.ok()) << blob.status();
      absl::StatusOr<SavedState> s = DecodeState(*blob);
      ASSERT_TRUE(s.ok()) << s.status();
      kept[r] = s->residuals;
    }
    for (int r = kWorld - 1; r >= 0; --r) EXPECT_TRUE(clients[r]->Close().ok());
    runs.push_back(std::move(results));
    residuals.push_back(std::move(kept));
  }
  for (int step = 0; step < kSteps; ++step) {
    for (int r = 0; r < kWorld; ++r) {
      for (size_t m = 0; m < 2; ++m) {
        for (const absl::Status& s : runs[m][r][step].statuses) ASSERT_TRUE(s.ok()) << s;
        EXPECT_EQ(runs[m][r][step].spans, runs[0][0][step].spans)
            << "mode " << m << " rank " << r << " step " << step;
      }
    }
  }
  EXPECT_EQ(residuals[0], residuals[1]) << "the same residuals with and without the pipeline";
  for (uint64_t key = 0; key < kSpanSizes.size(); ++key) {
    for (size_t i = 0; i < kSpanSizes[key]; ++i) {
      double given = 0, delivered = 0, kept = 0;
      for (int step = 0; step < kSteps; ++step) {
        for (int r = 0; r < kWorld; ++r) given += Grad(key, r, step)[i];
        delivered += runs[0][0][step].spans.at(key)[i];
      }
      for (int r = 0; r < kWorld; ++r) kept += residuals[0][r].at(key)[i];
      ASSERT_EQ(given, delivered + kept) << "span " << key << " element " << i;
    }
  }
}

}  // namespace
}  // namespace gradex::client
