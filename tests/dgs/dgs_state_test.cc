// DgsWorkerState and DgsServerShard on integer gradients, through the frames:
// density 1 is ASGD step for step, M − v_k holds every unsent entry exactly,
// SAMomentum follows the seed's formula, and max_staleness holds.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "tests/dgs/dgs_util.h"

namespace gradex::dgs_test {
namespace {

struct Setup {
  int shards;
  uint32_t full_sync_every;
};

class DgsEquivalence : public ::testing::TestWithParam<Setup> {};

// ASGD (the seed's baseline: dense push of the worker's momentum step, dense
// pull of the model) against DGS at density 1, three workers in lock-step,
// compared bit for bit after every push-pull; and the float ASGD against the
// same in double, which shows the run stayed in the exact integers/dyadics.
TEST_P(DgsEquivalence, DensityOneIsAsgdStepForStep) {
  const ps::DgsLayout layout = MakeLayout({5, 7, 4});
  const uint32_t workers = 3;
  const float m = 0.5f, wd = 0.5f, lr = 1.0f;
  std::mt19937 rng(11);
  auto ranges = layout.SplitShards(GetParam().shards);
  ASSERT_TRUE(ranges.ok());
  std::vector<ps::DgsServerShard> shards;
  for (uint32_t s = 0; s < ranges->size(); ++s) {
    auto sh = ps::DgsServerShard::Create(
        layout, s, (*ranges)[s],
        {.workers = workers, .full_sync_every = GetParam().full_sync_every});
    ASSERT_TRUE(sh.ok()) << sh.status();
    shards.push_back(*std::move(sh));
  }
  std::vector<ps::DgsWorkerState> ws;
  std::vector<std::vector<float>> params;
  for (uint32_t k = 0; k < workers; ++k) {
    auto w = ps::DgsWorkerState::Create(layout, k, *ranges,
                                        {.momentum = m, .weight_decay = wd, .density = 1.0f});
    ASSERT_TRUE(w.ok()) << w.status();
    ws.push_back(*std::move(w));
    params.push_back(IntGrad(layout.total(), rng));
  }
  // The reference: M starts as worker 0's parameters (the first hello).
  std::vector<float> ref_m = params[0];
  std::vector<double> dref_m(ref_m.begin(), ref_m.end());
  std::vector<std::vector<float>> ref_u(workers, std::vector<float>(layout.total(), 0));
  std::vector<std::vector<double>> dref_u(workers, std::vector<double>(layout.total(), 0));
  for (uint32_t k = 0; k < workers; ++k) {
    for (ps::DgsServerShard& sh : shards) Join(sh, ws[k], params[k]);
    ASSERT_EQ(params[k], ref_m);
  }
  std::vector<std::vector<float>> ref_w(workers, ref_m);
  for (int round = 0; round < 12; ++round) {
    for (uint32_t k = 0; k < workers; ++k) {
      SCOPED_TRACE(::testing::Message() << "round " << round << " worker " << k);
      const std::vector<float> g = IntGrad(layout.total(), rng);
      ps::DgsPush push;
      ASSERT_TRUE(ws[k].MakePush(g, params[k], lr, &push).ok());
      EXPECT_EQ(push.ratio, 1.0f);
      for (ps::DgsServerShard& sh : shards) PushPull(sh, ws[k], push, params[k]);
      for (size_t i = 0; i < layout.total(); ++i) {
        const float a = m * ref_u[k][i] + lr * (g[i] + wd * ref_w[k][i]);
        const double da = 0.5 * dref_u[k][i] + (g[i] + 0.5 * double{ref_w[k][i]});
        ref_u[k][i] = a;
        dref_u[k][i] = da;
        ref_m[i] += -a;
        dref_m[i] -= da;
        ASSERT_EQ(double{ref_m[i]}, dref_m[i]) << "not exact at " << i;
      }
      ref_w[k] = ref_m;
      EXPECT_EQ(params[k], ref_m);
      EXPECT_TRUE(std::equal(ws[k].velocity().begin(), ws[k].velocity().end(), ref_u[k].begin()));
      for (ps::DgsServerShard& sh : shards) {
        EXPECT_TRUE(
            std::equal(sh.model().begin(), sh.model().end(), ref_m.begin() + sh.range().begin));
        EXPECT_EQ(sh.total_refused(), 0u);
      }
    }
  }
  EXPECT_EQ(shards[0].version(), 36u);
  if (GetParam().full_sync_every < 36) EXPECT_GT(shards[0].stats().full_syncs, 3u);
}

INSTANTIATE_TEST_SUITE_P(Shards, DgsEquivalence,
                         ::testing::Values(Setup{1, 150}, Setup{2, 150}, Setup{1, 4}, Setup{2, 5}));

class DgsConservation : public ::testing::TestWithParam<std::tuple<float, int>> {};

// At any density, per worker k: the shard's M − v_k is exactly M minus what
// was sent to k (the sum of its pulls since its last full sync), the
// worker's parameters are exactly what was sent, M is the start plus every
// push, and a pull moves exactly its entries out of M − v_k: every unsent
// entry stays there.
// (Momentum 1 keeps every value an integer over 25 rounds; the server's
// bookkeeping does not depend on the worker's momentum.)
TEST_P(DgsConservation, ModelMinusSentHoldsEveryUnsentEntry) {
  const auto [density, nshards] = GetParam();
  const ps::DgsLayout layout = MakeLayout({23, 9, 40, 1, 17});
  const uint32_t workers = 3;
  std::mt19937 rng(5);
  auto ranges = layout.SplitShards(nshards);
  ASSERT_TRUE(ranges.ok());
  std::vector<ps::DgsServerShard> shards;
  for (uint32_t s = 0; s < ranges->size(); ++s) {
    shards.push_back(*ps::DgsServerShard::Create(layout, s, (*ranges)[s],
                                                 {.workers = workers, .full_sync_every = 10}));
  }
  std::vector<ps::DgsWorkerState> ws;
  std::vector<std::vector<float>> params(workers, IntGrad(layout.total(), rng));
  for (uint32_t k = 0; k < workers; ++k) {
    ws.push_back(*ps::DgsWorkerState::Create(
        layout, k, *ranges, {.momentum = 1.0f, .weight_decay = 0, .density = density}));
    for (ps::DgsServerShard& sh : shards) Join(sh, ws[k], params[k]);
  }
  std::vector<double> model(params[0].begin(), params[0].end());  // M0 + every push
  std::vector<std::vector<double>> sent(workers, model);          // what each worker got
  for (int round = 0; round < 25; ++round) {
    // Workers in a shuffled order each round: no lock-step needed here.
    std::vector<uint32_t> order(workers);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (uint32_t k : order) {
      SCOPED_TRACE(::testing::Message() << "round " << round << " worker " << k);
      ps::DgsPush push;
      ASSERT_TRUE(ws[k].MakePush(IntGrad(layout.total(), rng), params[k], 1.0f, &push).ok());
      EXPECT_EQ(push.is_dense, push.ratio >= 1.0f);  // R = 1 takes the dense route
      const kernels::SparseVec entries = ps::DgsPushEntries(push);
      EXPECT_EQ(push.nnz, entries.nnz());
      for (uint32_t j = 0; j < layout.layers(); ++j) {
        const ps::DgsRange l = layout.layer(j);
        const auto n = std::count_if(entries.idx.begin(), entries.idx.end(),
                                     [&](uint32_t i) { return i >= l.begin && i < l.end; });
        EXPECT_LE(static_cast<uint32_t>(n), ps::DgsKeep(l.size(), push.ratio));
      }
      for (size_t e = 0; e < entries.nnz(); ++e) model[entries.idx[e]] += entries.val[e];
      for (ps::DgsServerShard& sh : shards) {
        const ps::DgsRange r = sh.range();
        std::vector<float> before(r.size());  // M − v_k before the pull, after the push
        for (uint32_t i = 0; i < r.size(); ++i) {
          before[i] = static_cast<float>(model[r.begin + i] - sent[k][r.begin + i]);
        }
        const uint64_t full_before = sh.stats().full_syncs;
        ps::DgsMessage pull = PushPull(sh, ws[k], push, params[k]);
        for (uint32_t i = 0; i < r.size(); ++i) {
          ASSERT_EQ(double{sh.model()[i]}, model[r.begin + i]) << "M at " << r.begin + i;
        }
        if (sh.stats().full_syncs != full_before) {
          ASSERT_EQ(pull.kind, ps::DgsKind::kFullSync);
          for (uint32_t i = 0; i < r.size(); ++i) sent[k][r.begin + i] = model[r.begin + i];
        } else {
          ASSERT_EQ(pull.kind, push.ratio >= 1.0f ? ps::DgsKind::kDensePull : ps::DgsKind::kPull);
          size_t limit = 0;
          for (const ps::DgsRange& p : layout.Pieces(r)) limit += ps::DgsKeep(p.size(), push.ratio);
          EXPECT_LE(pull.sparse.nnz(), limit);
          std::vector<uint8_t> was_sent(r.size(), 0);
          for (size_t e = 0; e < pull.sparse.nnz(); ++e) {
            const uint32_t i = pull.sparse.idx[e] - r.begin;
            EXPECT_EQ(pull.sparse.val[e], before[i]);  // sent whole, never in part
            sent[k][pull.sparse.idx[e]] += pull.sparse.val[e];
            was_sent[i] = 1;
          }
          for (uint32_t i = 0; i < r.size(); ++i) {
            ASSERT_EQ(sh.unsent(k)[i], was_sent[i] ? 0.0f : before[i])
                << "unsent entry " << r.begin + i;
          }
        }
        for (uint32_t i = 0; i < r.size(); ++i) {
          // M − v_k exactly, for every worker (not only the one that pulled).
          for (uint32_t j = 0; j < workers; ++j) {
            ASSERT_EQ(double{sh.unsent(j)[i]}, model[r.begin + i] - sent[j][r.begin + i])
                << "worker " << j << " entry " << r.begin + i;
          }
          ASSERT_EQ(double{params[k][r.begin + i]}, sent[k][r.begin + i]);
        }
      }
    }
  }
  for (const ps::DgsServerShard& sh : shards) EXPECT_EQ(sh.total_refused(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Densities, DgsConservation,
                         ::testing::Combine(::testing::Values(0.05f, 0.3f, 1.0f),
                                            ::testing::Values(1, 2, 3)));

// The seed's SAMomentum per element: a = m·u + lr·(g + wd·w); the top R% of
// |a| per layer is pushed (as −a) and keeps u = a; the rest keeps u = a / m.
// The last layer (1 element) is kept whole: the one-pass route.
TEST(DgsWorker, SamomentumFollowsTheSeed) {
  const ps::DgsLayout layout = MakeLayout({16, 10, 3, 1});
  const float m = 0.5f, wd = 0.25f, lr = 1.0f, density = 0.25f;
  auto w = ps::DgsWorkerState::Create(layout, 0, {{0, 30}},
                                      {.momentum = m, .weight_decay = wd, .density = density});
  ASSERT_TRUE(w.ok());
  std::mt19937 rng(3);
  const std::vector<float> params = IntGrad(layout.total(), rng);
  std::vector<float> u(layout.total(), 0);
  for (int step = 0; step < 10; ++step) {
    const std::vector<float> g = IntGrad(layout.total(), rng);
    ps::DgsPush push;
    ASSERT_TRUE(w->MakePush(g, params, lr, &push).ok());
    kernels::SparseVec want;
    for (uint32_t j = 0; j < layout.layers(); ++j) {
      const ps::DgsRange l = layout.layer(j);
      std::vector<uint32_t> order;
      std::vector<float> a(layout.total());
      for (uint32_t i = l.begin; i < l.end; ++i) {
        a[i] = m * u[i] + lr * (g[i] + wd * params[i]);
        if (a[i] != 0) order.push_back(i);
      }
      std::stable_sort(order.begin(), order.end(),
                       [&](uint32_t x, uint32_t y) { return std::fabs(a[x]) > std::fabs(a[y]); });
      order.resize(std::min<size_t>(order.size(), ps::DgsKeep(l.size(), density)));
      std::sort(order.begin(), order.end());
      for (uint32_t i = l.begin; i < l.end; ++i) {
        const bool sent = std::binary_search(order.begin(), order.end(), i);
        u[i] = sent ? a[i] : a[i] / m;
        if (sent) {
          want.idx.push_back(i);
          want.val.push_back(-a[i]);
        }
      }
    }
    EXPECT_EQ(push.entries.idx, want.idx) << "step " << step;
    EXPECT_EQ(push.entries.val, want.val) << "step " << step;
    EXPECT_TRUE(std::equal(u.begin(), u.end(), w->velocity().begin())) << "step " << step;
  }
}

// A push the shard did not apply is put back: its entries become unsent
// (u = a/m) inside that shard's range only, on either route.
TEST(DgsWorker, UnsendMakesTheEntriesUnsentAgain) {
  const ps::DgsLayout layout = MakeLayout({12, 8});
  for (float density : {0.25f, 1.0f}) {
    SCOPED_TRACE(density);
    auto w = ps::DgsWorkerState::Create(layout, 0, {{0, 10}, {10, 20}},
                                        {.momentum = 0.5f, .weight_decay = 0, .density = density});
    std::mt19937 rng(5);
    ps::DgsPush push;
    ASSERT_TRUE(w->MakePush(IntGrad(20, rng), IntGrad(20, rng), 1, &push).ok());
    EXPECT_EQ(push.is_dense, density == 1.0f);
    const std::vector<float> u(w->velocity().begin(), w->velocity().end());
    const kernels::SparseVec e = ps::DgsPushEntries(push);
    std::vector<uint8_t> sent(20, 0);
    for (uint32_t i : e.idx) sent[i] = 1;
    const uint64_t in_range =
        std::count_if(e.idx.begin(), e.idx.end(), [](uint32_t i) { return i >= 10; });
    EXPECT_EQ(w->Unsend(1, push), in_range);
    for (uint32_t i = 0; i < 20; ++i) {
      // Sent entries had u = a; put back, u = a / m = 2a, as for unsent ones.
      EXPECT_EQ(w->velocity()[i], i >= 10 && sent[i] ? 2 * u[i] : u[i]) << i;
      if (sent[i])
        EXPECT_EQ(e.val[std::find(e.idx.begin(), e.idx.end(), i) - e.idx.begin()], -u[i]);
    }
  }
}

TEST(DgsWorker, RatioScalesWithTheLearningRate) {
  const ps::DgsLayout layout = MakeLayout({100});
  auto w = ps::DgsWorkerState::Create(layout, 0, {{0, 100}}, {.density = 0.1f, .lr0 = 0.1f});
  ASSERT_TRUE(w.ok());
  EXPECT_NEAR(w->Ratio(0.1f), 0.1, 1e-7);
  EXPECT_NEAR(w->Ratio(0.01f), 0.01, 1e-8);
  EXPECT_EQ(w->Ratio(5.0f), 1.0);
  auto dense = ps::DgsWorkerState::Create(layout, 0, {{0, 100}}, {.density = 1.0f, .lr0 = 0.1f});
  EXPECT_EQ(dense->Ratio(0.001f), 1.0);  // ASGD stays dense whatever lr
  EXPECT_EQ(ps::DgsKeep(100, 0.001), 1u);
  EXPECT_EQ(ps::DgsKeep(100, 0.011), 2u);
  EXPECT_EQ(ps::DgsKeep(100, 1.0), 100u);
}

TEST(DgsWorker, BadOptionsAndInputsAreRefused) {
  const ps::DgsLayout layout = MakeLayout({10, 10});
  EXPECT_FALSE(ps::DgsWorkerState::Create(layout, 0, {{0, 20}}, {.momentum = 0}).ok());
  EXPECT_FALSE(ps::DgsWorkerState::Create(layout, 0, {{0, 20}}, {.density = 1.5f}).ok());
  EXPECT_FALSE(ps::DgsWorkerState::Create(layout, 0, {{0, 20}}, {.weight_decay = -1}).ok());
  EXPECT_FALSE(ps::DgsWorkerState::Create(layout, 0, {{0, 10}}, {}).ok());            // a gap
  EXPECT_FALSE(ps::DgsWorkerState::Create(layout, 0, {{0, 10}, {11, 20}}, {}).ok());  // a hole
  auto w = ps::DgsWorkerState::Create(layout, 0, {{0, 10}, {10, 20}}, {});
  ASSERT_TRUE(w.ok());
  std::vector<float> p(20, 1), g(20, 1);
  ps::DgsPush push;
  EXPECT_FALSE(w->MakePush(std::span<const float>(g).first(19), p, 0.1f, &push).ok());
  EXPECT_FALSE(w->MakePush(g, p, 0.0f, &push).ok());
  g[3] = NAN;
  EXPECT_FALSE(w->MakePush(g, p, 0.1f, &push).ok());
  EXPECT_TRUE(
      std::all_of(w->velocity().begin(), w->velocity().end(), [](float x) { return x == 0; }));
  // A pull before a full sync, or for another worker, is refused.
  ps::DgsMessage pull;
  pull.kind = ps::DgsKind::kPull;
  pull.shard = 1;
  EXPECT_FALSE(w->ApplyPull(1, pull, p).ok());
  pull.worker = 5;
  pull.kind = ps::DgsKind::kFullSync;
  pull.dense.assign(10, 0);
  EXPECT_FALSE(w->ApplyPull(1, pull, p).ok());
  EXPECT_EQ(p, std::vector<float>(20, 1));
}

TEST(DgsServer, StalenessStaircaseHoldsFastWorkersAndNeverDeadlocks) {
  const ps::DgsLayout layout = MakeLayout({8});
  EXPECT_FALSE(
      ps::DgsServerShard::Create(layout, 0, {0, 8}, {.workers = 3, .max_staleness = 1}).ok());
  auto sh = ps::DgsServerShard::Create(layout, 0, {0, 8}, {.workers = 3, .max_staleness = 2});
  ASSERT_TRUE(sh.ok());
  std::mt19937 rng(9);
  std::vector<ps::DgsWorkerState> ws;
  std::vector<std::vector<float>> params(3, IntGrad(8, rng));
  for (uint32_t k = 0; k < 3; ++k) {
    ws.push_back(
        *ps::DgsWorkerState::Create(layout, k, {{0, 8}}, {.momentum = 1, .density = 0.5f}));
    Join(*sh, ws[k], params[k]);
  }
  auto step = [&](uint32_t k) {
    ps::DgsPush push;
    ASSERT_TRUE(ws[k].MakePush(IntGrad(8, rng), params[k], 1, &push).ok());
    PushPull(*sh, ws[k], push, params[k]);
  };
  EXPECT_TRUE(sh->MayApply(0));
  step(0);
  EXPECT_FALSE(sh->MayApply(0));  // 1 and 2 would be 2 behind together
  EXPECT_TRUE(sh->MayApply(1));
  step(1);
  EXPECT_FALSE(sh->MayApply(1));
  EXPECT_TRUE(sh->MayApply(2));
  // Random schedules: the most stale worker is always admitted, nobody is
  // ever more than 2 versions behind.
  for (int t = 0; t < 300; ++t) {
    uint32_t most = 0;
    for (uint32_t k = 1; k < 3; ++k) {
      if (sh->staleness(k) > sh->staleness(most)) most = k;
    }
    ASSERT_TRUE(sh->MayApply(most));
    const uint32_t k = std::uniform_int_distribution<uint32_t>(0, 2)(rng);
    if (sh->MayApply(k)) step(k);
    for (uint32_t j = 0; j < 3; ++j) ASSERT_LE(sh->staleness(j), 2u);
  }
  // A push applied past the admission (as a broken server would) makes the
  // slowest worker's next push more than 2 behind: refused, not applied.
  uint32_t slow = 0;
  for (uint32_t k = 1; k < 3; ++k) {
    if (sh->staleness(k) > sh->staleness(slow)) slow = k;
  }
  while (sh->staleness(slow) <= 2) step((slow + 1) % 3);
  const std::vector<float> m(sh->model().begin(), sh->model().end());
  const uint64_t version = sh->version();
  ps::DgsMessage push;
  push.kind = ps::DgsKind::kPush;
  push.worker = slow;
  push.version = ws[slow].version(0);
  push.ratio = 1;
  push.sparse.idx = {1};
  push.sparse.val = {4};
  ps::DgsRefusal why;
  EXPECT_FALSE(sh->ApplyPush(slow, push, &why).ok());
  EXPECT_EQ(why, ps::DgsRefusal::kBeyondStaleness);
  EXPECT_EQ(sh->refused()[static_cast<size_t>(ps::DgsRefusal::kBeyondStaleness)], 1u);
  EXPECT_EQ(sh->version(), version);
  EXPECT_TRUE(std::equal(m.begin(), m.end(), sh->model().begin()));
}

}  // namespace
}  // namespace gradex::dgs_test
