// A hostile DGS worker (finite values, so the frames' non-finite check passes
// them) and a shard restored from an older snapshot:
//  - pushes of ±3e38 whose sums into M would overflow are refused
//    (kOverflow), M, the other workers' M − v_k and the version unchanged,
//    and the model stays finite, so its snapshot is written and restores;
//  - a shard restarted from a snapshot older than what its workers saw
//    counts the gap from the workers' hellos, and each worker takes a full
//    sync and counts the versions it lost.
#include <atomic>
#include <cmath>
#include <limits>
#include <thread>

#include "ps/dgs_exchange.h"
#include "tests/dgs/dgs_util.h"
#include "transport/loopback_transport.h"

namespace gradex::dgs_test {
namespace {

using std::chrono::milliseconds;

constexpr float kHuge = 3e38f;

ps::DgsMessage DensePush(uint32_t worker, uint64_t base, std::vector<float> values) {
  ps::DgsMessage m;
  m.kind = ps::DgsKind::kDensePush;
  m.worker = worker;
  m.shard = 0;
  m.version = base;
  m.ratio = 1.0f;
  m.dense = std::move(values);
  return m;
}

ps::DgsMessage SparsePush(uint32_t worker, uint64_t base, uint32_t at, float value) {
  ps::DgsMessage m;
  m.kind = ps::DgsKind::kPush;
  m.worker = worker;
  m.shard = 0;
  m.version = base;
  m.ratio = 0.5f;
  m.sparse.idx = {at};
  m.sparse.val = {value};
  return m;
}

bool AllFinite(std::span<const float> v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

size_t Overflows(const ps::DgsServerShard& s) {
  return s.refused()[static_cast<size_t>(ps::DgsRefusal::kOverflow)];
}

TEST(HostileDgs, PushesThatWouldOverflowAreRefusedAndTheModelStaysFinite) {
  const ps::DgsLayout layout = MakeLayout({16});
  ps::DgsServerShard shard = *ps::DgsServerShard::Create(layout, 0, {0, 16}, {.workers = 2});
  ps::DgsMessage reply;
  const std::vector<float> ones(16, 1.0f);
  ASSERT_TRUE(shard.Join(0, ones, &reply).ok());
  ASSERT_TRUE(shard.Join(1, {}, &reply).ok());
  // The hostile worker 0: +3e38 everywhere is still finite once.
  ASSERT_TRUE(shard.ApplyPush(0, DensePush(0, 0, std::vector<float>(16, kHuge))).ok());
  ASSERT_TRUE(shard.MakePull(0, &reply).ok());
  ASSERT_TRUE(AllFinite(shard.model()));
  for (int round = 0; round < 3; ++round) {
    const std::vector<float> m(shard.model().begin(), shard.model().end());
    const std::vector<float> d1(shard.unsent(1).begin(), shard.unsent(1).end());
    const uint64_t version = shard.version();
    ps::DgsRefusal why = ps::DgsRefusal::kNone;
    absl::Status st =
        shard.ApplyPush(0, DensePush(0, version, std::vector<float>(16, kHuge)), &why);
    EXPECT_EQ(why, ps::DgsRefusal::kOverflow) << st;
    EXPECT_NE(st.message().find("element 0: M "), std::string::npos) << st.message();
    st = shard.ApplyPush(0, SparsePush(0, version, 7, kHuge), &why);
    EXPECT_EQ(why, ps::DgsRefusal::kOverflow) << st;
    EXPECT_NE(st.message().find("element 7"), std::string::npos) << st.message();
    // Nothing moved: M, the other worker's M − v_1, the version.
    EXPECT_EQ(std::vector<float>(shard.model().begin(), shard.model().end()), m);
    EXPECT_EQ(std::vector<float>(shard.unsent(1).begin(), shard.unsent(1).end()), d1);
    EXPECT_EQ(shard.version(), version);
  }
  EXPECT_EQ(Overflows(shard), 6u);
  // The other direction: two −3e38 pushes from an honest-looking start.
  ASSERT_TRUE(shard.ApplyPush(0, SparsePush(0, shard.version(), 3, -kHuge)).ok());  // 3e38 → ~1
  ASSERT_TRUE(shard.MakePull(0, &reply).ok());
  ASSERT_TRUE(shard.ApplyPush(0, SparsePush(0, shard.version(), 3, -kHuge)).ok());  // → −3e38
  ASSERT_TRUE(shard.MakePull(0, &reply).ok());
  EXPECT_FALSE(shard.ApplyPush(0, SparsePush(0, shard.version(), 3, -kHuge)).ok());
  EXPECT_EQ(Overflows(shard), 7u);
  // Ordinary pushes still apply after the refusals.
  std::vector<float> small(16, 0.0f);
  small[2] = 0.5f;
  ASSERT_TRUE(shard.ApplyPush(0, DensePush(0, shard.version(), small)).ok());
  EXPECT_TRUE(AllFinite(shard.model()));
  EXPECT_TRUE(AllFinite(shard.unsent(1)));
  // The model is finite, so it is snapshotted, and the snapshot restores.
  absl::StatusOr<transport::Bytes> snap = shard.Snapshot();
  ASSERT_TRUE(snap.ok()) << snap.status();
  ps::DgsServerShard again = *ps::DgsServerShard::Create(layout, 0, {0, 16}, {.workers = 2});
  EXPECT_TRUE(again.Restore(*snap).ok());
}

// One worker and one shard on a loopback fabric; the shard serves on a
// thread while this is in scope.
class Served {
 public:
  Served(ps::DgsServerShard& shard, transport::Transport& t)
      : server_(t, ps::DgsJob{7, 3}, shard, {0}), thread_([this] {
          while (!stop_.load()) {
            if (!server_.ServeUntil(transport::DeadlineIn(milliseconds(20))).ok()) return;
          }
        }) {}
  ~Served() {
    stop_.store(true);
    thread_.join();
  }
  const ps::DgsServerStats& stats() const { return server_.stats(); }

 private:
  ps::DgsServer server_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(HostileDgs, AShardRestoredFromAnOlderSnapshotTellsItsWorkersTheGap) {
  const ps::DgsLayout layout = MakeLayout({24});
  const std::vector<ps::DgsRange> ranges = *layout.SplitShards(1);
  ps::DgsWorkerState w = *ps::DgsWorkerState::Create(
      layout, 0, ranges, {.momentum = 1, .weight_decay = 0, .density = 1});
  std::mt19937 rng(3);
  std::vector<float> params = IntGrad(24, rng);
  transport::Bytes old;
  uint64_t old_version = 0;
  {
    auto t = transport::CreateLoopbackTransports(2);
    ps::DgsServerShard shard = *ps::DgsServerShard::Create(layout, 0, ranges[0], {.workers = 1});
    ps::DgsPushPull link(*t[0], ps::DgsJob{7, 3}, {{0, 1}});
    Served s(shard, *t[1]);
    for (int step = 0; step < 9; ++step) {
      ASSERT_TRUE(
          link.Step(w, IntGrad(24, rng), params, 1, transport::DeadlineIn(milliseconds(20000)))
              .ok());
      // Between steps the shard is idle (each Step waits for its reply).
      if (step == 2) {  // the snapshot that will be restored: 6 versions old by the end
        old = *shard.Snapshot();
        old_version = shard.version();
      }
    }
    ASSERT_EQ(shard.version(), old_version + 6);
  }
  const uint64_t worker_saw = w.version(0);
  ASSERT_EQ(worker_saw, old_version + 6);
  // The server restarts from the old snapshot (a new epoch, a new fabric).
  auto t = transport::CreateLoopbackTransports(2);
  ps::DgsServerShard shard = *ps::DgsServerShard::Create(layout, 0, ranges[0], {.workers = 1});
  ASSERT_TRUE(shard.Restore(old).ok());
  ps::DgsPushPull link(*t[0], ps::DgsJob{7, 3}, {{0, 1}});
  ps::DgsStepStats stats;
  Served s(shard, *t[1]);
  ASSERT_TRUE(
      link.Step(w, IntGrad(24, rng), params, 1, transport::DeadlineIn(milliseconds(20000)), &stats)
          .ok());
  // The shard counted the gap from the worker's hello, naming both versions.
  EXPECT_EQ(s.stats().version_gaps, 1u);
  EXPECT_EQ(s.stats().last_gap, 6u);
  EXPECT_EQ(s.stats().last_gap_worker, 0u);
  EXPECT_EQ(s.stats().last_gap_worker_version, worker_saw);
  // The worker took a full sync at the old version and counted what it lost.
  EXPECT_EQ(stats.full_syncs, 1u);
  EXPECT_EQ(stats.version_gaps, 1u);
  EXPECT_EQ(stats.versions_lost, 6u);
  EXPECT_EQ(w.version(0), old_version + 1);  // the full sync, then this step's push
}

}  // namespace
}  // namespace gradex::dgs_test
