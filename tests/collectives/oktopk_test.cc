// Ok-Topk beyond the shared invariant sweep: the selected counts stay near k
// over hundreds of calls on a growing residual (and the authors' nudging rule
// does not), the periods τ and τ', boundary agreement, data balancing, the
// residual rule of Algorithm 2 and the volume against Table 1.
#include "collectives/algorithms/oktopk/oktopk.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "collectives/algorithms/oktopk/oktopk_exchange.h"
#include "collectives/block_layout.h"
#include "gtest/gtest.h"
#include "tests/collectives/harness.h"
#include "transport/loopback_transport.h"

namespace gradex::testing {
namespace {

// Fresh N(0, 1) gradients: a window at a random offset of a shared pool of
// normal values with a random sign per call (cheaper than drawing 4N values a
// call; consecutive calls share no alignment).
std::vector<float> Normal(int rank, int call, size_t n) {
  static const std::vector<float>* pool = [] {
    auto* v = new std::vector<float>(1u << 22);
    std::mt19937_64 rng(0x5eed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (float& x : *v) x = d(rng);
    return v;
  }();
  std::mt19937_64 rng(0x5eed + 1000003ull * rank + call);
  const size_t off = rng() % (pool->size() - n);
  const float sign = rng() % 2 ? 1.0f : -1.0f;
  std::vector<float> g(pool->begin() + off, pool->begin() + off + n);
  for (float& v : g) v *= sign;
  return g;
}

struct CallRecord {
  collectives::CallStats stats;
  collectives::algorithms::oktopk::OkTopkCallInfo info;
};

// Runs `calls` calls of an oktopk instance per rank on normal gradients with
// a persistent residual; returns records[call][rank].
std::vector<std::vector<CallRecord>> RunNormal(collectives::algorithms::oktopk::ThresholdRule rule,
                                               int world, size_t n,
                                               const collectives::AllreduceOptions& opt,
                                               int calls) {
  std::vector<std::vector<CallRecord>> rec(calls, std::vector<CallRecord>(world));
  auto status = RunRanks(world, [&](int rank, transport::Transport& t) -> absl::Status {
    auto algo = collectives::algorithms::oktopk::CreateOkTopk({.rule = rule, .agreement = nullptr});
    std::vector<float> residual(n, 0.0f);
    for (int c = 0; c < calls; ++c) {
      std::vector<float> grad = Normal(rank, c, n);
      collectives::CallContext ctx{&t,
                                   42,
                                   1,
                                   static_cast<uint64_t>(c),
                                   transport::DeadlineIn(std::chrono::seconds(20)),
                                   static_cast<uint64_t>(c)};
      collectives::AllreduceResult result;
      absl::Status s = RunOrAbort(*algo, ctx, opt, grad, residual, &result, &rec[c][rank].stats);
      if (!s.ok()) return s;
      rec[c][rank].info = *collectives::algorithms::oktopk::OkTopkLastCall(*algo);
    }
    return absl::OkStatus();
  });
  for (const auto& s : status) EXPECT_TRUE(s.ok()) << s;
  if (getenv("OKTOPK_TRACE")) {
    for (int c = 0; c < calls; ++c) {
      std::printf("call %d local %zu%s global %zu%s\n", c,
                  static_cast<size_t>(rec[c][0].stats.Detail("local_selected")),
                  rec[c][0].info.local.fell_back ? "*" : "",
                  static_cast<size_t>(rec[c][0].stats.Detail("global_selected")),
                  rec[c][0].info.global.fell_back ? "*" : "");
    }
  }
  return rec;
}

struct BandReport {
  size_t local_out = 0, global_out = 0, local_max = 0, global_max = 0;
  size_t local_fallbacks = 0, global_fallbacks = 0, reuse_calls = 0;
  double local_dev = 0, global_dev = 0;  // mean |count / k - 1|
};

BandReport Measure(const std::vector<std::vector<CallRecord>>& rec, size_t k, int warmup) {
  BandReport r;
  for (size_t c = warmup; c < rec.size(); ++c) {
    const size_t g = static_cast<size_t>(rec[c][0].stats.Detail("global_selected"));
    r.global_max = std::max(r.global_max, g);
    r.global_out += g < collectives::algorithms::oktopk::BandLow(k) ||
                    g > collectives::algorithms::oktopk::BandHigh(k);
    r.global_fallbacks += rec[c][0].info.global.fell_back;
    r.global_dev += std::fabs(double(g) / k - 1) / (rec.size() - warmup);
    for (const CallRecord& x : rec[c]) {
      const size_t l = static_cast<size_t>(x.stats.Detail("local_selected"));
      r.local_max = std::max(r.local_max, l);
      r.local_out += l < collectives::algorithms::oktopk::BandLow(k) ||
                     l > collectives::algorithms::oktopk::BandHigh(k);
      r.local_fallbacks += x.info.local.fell_back;
      r.local_dev += std::fabs(double(l) / k - 1) / ((rec.size() - warmup) * rec[c].size());
      r.reuse_calls += !x.info.local.exact || x.info.local.fell_back;
    }
  }
  return r;
}

// docs/design.md's case: P = 4, N = 200003, density 0.01, fresh normal gradients
// every call, 500 calls. Ours stays in [0.8k, 1.25k] after a short warmup and
// rarely needs its exact redo; the authors' ×1.025 rule leaves the band.
TEST(OkTopkTest, SelectedCountsStayNearKWhereTheAuthorsRuleDrifts) {
  const int p = 4, calls = 500, warmup = 5;
  const size_t n = 200003, k = catalog::KeepCount(0.01, n);
  collectives::AllreduceOptions opt;
  opt.density = 0.01;
  auto ours =
      RunNormal(collectives::algorithms::oktopk::ThresholdRule::kTracking, p, n, opt, calls);
  BandReport a = Measure(ours, k, warmup);
  auto theirs =
      RunNormal(collectives::algorithms::oktopk::ThresholdRule::kAuthors, p, n, opt, calls);
  BandReport b = Measure(theirs, k, warmup);
  std::printf(
      "k=%zu ours: local out-of-band %zu max %zu (%.2fk) mean |c/k-1| %.3f fallbacks %zu/%zu; "
      "global out %zu max %zu (%.2fk) mean |c/k-1| %.3f fallbacks %zu/%d\n",
      k, a.local_out, a.local_max, double(a.local_max) / k, a.local_dev, a.local_fallbacks,
      a.reuse_calls, a.global_out, a.global_max, double(a.global_max) / k, a.global_dev,
      a.global_fallbacks, calls - warmup);
  std::printf("authors: local out-of-band %zu max %zu (%.2fk); global out %zu max %zu (%.2fk)\n",
              b.local_out, b.local_max, double(b.local_max) / k, b.global_out, b.global_max,
              double(b.global_max) / k);
  EXPECT_EQ(a.local_out, 0u);
  EXPECT_EQ(a.global_out, 0u);
  // The controller, not the exact redo, keeps the count near k once the
  // residual's fastest growth (the first ~30 calls) is over: few redos and a
  // small mean deviation.
  BandReport settled = Measure(ours, k, 32);
  EXPECT_LE(settled.local_fallbacks, settled.reuse_calls / 50);
  EXPECT_LE(settled.global_fallbacks, size_t(calls - 32) / 50);
  EXPECT_LT(settled.local_dev, 0.05);
  EXPECT_LT(settled.global_dev, 0.05);
  // The authors' rule lags the growing residual: many calls out of band.
  EXPECT_GT(b.local_out, size_t(calls) / 10);
  EXPECT_GT(b.local_max, 2 * k);
  EXPECT_GT(b.local_dev, 0.25);
  // τ = 64 and τ' = 32 by step number.
  for (int c = 0; c < calls; ++c) {
    EXPECT_EQ(ours[c][0].info.agreed, c % 64 == 0) << c;
    if (c % 32 == 0) {
      EXPECT_TRUE(ours[c][0].info.local.exact && !ours[c][0].info.local.fell_back);
    }
  }
}

// Integer gradients whose large values move, after the boundaries were agreed
// at step 0 (τ = 1000; ties to lower indices put them low), into the last 5%
// of the indices: the global selection lands in the last region, the largest buffer passes 4x the
// mean and data balancing runs. Results stay bitwise consistent, conservation exact, and each
// rank's residual keeps exactly its undelivered values (Algorithm 2): every residual entry is 0
// (delivered) or the rank's own grad + old residual.
TEST(OkTopkTest, BalancingAndAlgorithmTwoResidualsConserveExactly) {
  const int p = 5, calls = 6;
  const size_t n = 20011;
  collectives::AllreduceOptions opt;
  opt.density = 0.01;
  opt.params["oktopk_tau"] = 1000;
  std::vector<std::vector<RankCall>> runs(calls, std::vector<RankCall>(p));
  std::vector<int> balanced(calls, 0);
  auto status = RunRanks(p, [&](int rank, transport::Transport& t) -> absl::Status {
    auto algo = collectives::algorithms::oktopk::CreateOkTopk();
    std::vector<float> residual(n, 0.0f);
    for (int c = 0; c < calls; ++c) {
      RankCall& rc = runs[c][rank];
      rc.grad = MakeGradient(9, rank, c, n, Values::kIntegers);
      if (c > 0) {
        for (size_t i = 0; i < n; ++i) rc.grad[i] *= i >= n - n / 20 ? 64.0f : 1.0f;
      }
      rc.residual_in = residual;
      collectives::CallContext ctx{&t,
                                   42,
                                   1,
                                   static_cast<uint64_t>(c),
                                   transport::DeadlineIn(std::chrono::seconds(20)),
                                   static_cast<uint64_t>(c)};
      collectives::AllreduceResult result;
      rc.status = RunOrAbort(*algo, ctx, opt, rc.grad, residual, &result, &rc.stats);
      if (!rc.status.ok()) return rc.status;
      rc.residual_out = residual;
      rc.result.assign(n, 0.0f);
      result.ToDense(rc.result);
      if (rank == 0) balanced[c] = collectives::algorithms::oktopk::OkTopkLastCall(*algo)->balanced;
    }
    return absl::OkStatus();
  });
  for (const auto& s : status) ASSERT_TRUE(s.ok()) << s;
  int balanced_calls = 0;
  for (int c = 0; c < calls; ++c) {
    SCOPED_TRACE("call " + std::to_string(c));
    balanced_calls += balanced[c];
    EXPECT_TRUE(Consistent(runs[c]));
    EXPECT_EQ(ConservationError(runs[c], false), 0.0);
    for (const RankCall& r : runs[c]) {
      EXPECT_LE(r.stats.result_nnz, r.stats.result_capacity);
      for (size_t i = 0; i < n; ++i) {
        const float acc = r.grad[i] + r.residual_in[i];
        ASSERT_TRUE(r.residual_out[i] == 0.0f || r.residual_out[i] == acc) << i;
      }
    }
  }
  EXPECT_GE(balanced_calls, 3);
  EXPECT_FALSE(balanced[0]);
}

// The coordinator can take the boundary agreement over: an injected
// agreement is asked at step 0 and every τ steps, and its boundaries are used.
class FixedAgreement final : public collectives::algorithms::oktopk::BoundaryAgreement {
 public:
  explicit FixedAgreement(std::atomic<int>* calls) : calls_(calls) {}
  absl::StatusOr<collectives::algorithms::oktopk::Boundaries> Agree(
      collectives::Link& link, std::span<const uint32_t> proposal, size_t n,
      collectives::PhaseTimes*, collectives::algorithms::oktopk::WireCount*) override {
    ++*calls_;
    collectives::algorithms::oktopk::Boundaries b =
        collectives::algorithms::oktopk::EqualBoundaries(
            n / 2, link.size());  // all regions in the first half
    b.back() = static_cast<uint32_t>(n);
    return b;
  }

 private:
  std::atomic<int>* calls_;
};

TEST(OkTopkTest, InjectedBoundaryAgreementIsAskedEveryTau) {
  const int p = 3, calls = 7;
  const size_t n = 3001;
  std::atomic<int> asked{0};
  collectives::AllreduceOptions opt;
  opt.density = 0.05;
  opt.params["oktopk_tau"] = 3;
  std::vector<std::vector<RankCall>> runs(calls, std::vector<RankCall>(p));
  auto status = RunRanks(p, [&](int rank, transport::Transport& t) -> absl::Status {
    auto algo = collectives::algorithms::oktopk::CreateOkTopk(
        {.rule = collectives::algorithms::oktopk::ThresholdRule::kTracking,
         .agreement = std::make_unique<FixedAgreement>(&asked)});
    std::vector<float> residual(n, 0.0f);
    for (int c = 0; c < calls; ++c) {
      RankCall& rc = runs[c][rank];
      rc.grad = MakeGradient(4, rank, c, n, Values::kGrid);
      rc.residual_in = residual;
      collectives::CallContext ctx{&t,
                                   42,
                                   1,
                                   static_cast<uint64_t>(c),
                                   transport::DeadlineIn(std::chrono::seconds(20)),
                                   static_cast<uint64_t>(c)};
      collectives::AllreduceResult result;
      absl::Status s = RunOrAbort(*algo, ctx, opt, rc.grad, residual, &result, &rc.stats);
      if (!s.ok()) return s;
      rc.residual_out = residual;
      rc.result.assign(n, 0.0f);
      result.ToDense(rc.result);
    }
    return absl::OkStatus();
  });
  for (const auto& s : status) ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(asked.load(), p * 3);  // steps 0, 3, 6
  for (auto& call : runs) {
    EXPECT_TRUE(Consistent(call));
    EXPECT_LE(ConservationError(call, true), 1e-6);
  }
}

// The in-call agreement is the mean of the proposals; a proposal that is not
// nondecreasing is rejected.
TEST(OkTopkTest, MeanBoundaryAgreement) {
  const int p = 4;
  const size_t n = 1000;
  std::vector<collectives::algorithms::oktopk::Boundaries> got(p);
  auto status = RunRanks(p, [&](int rank, transport::Transport& t) -> absl::Status {
    collectives::CallContext ctx{&t, 42, 1, 0, transport::DeadlineIn(std::chrono::seconds(10))};
    collectives::PhaseTimes times;
    collectives::algorithms::oktopk::WireCount wire;
    collectives::Link link(ctx, collectives::wire::CatalogId("oktopk"), &times);
    const uint32_t base = 100 * rank;  // proposals 100r + {10, 20, 30}
    std::vector<uint32_t> proposal = {base + 10, base + 20, base + 30};
    auto b = collectives::algorithms::oktopk::MeanBoundaryAgreement().Agree(link, proposal, n,
                                                                            &times, &wire);
    if (!b.ok()) return b.status();
    got[rank] = *b;
    return absl::OkStatus();
  });
  for (const auto& s : status) ASSERT_TRUE(s.ok()) << s;
  for (int r = 0; r < p; ++r)
    EXPECT_EQ(got[r], (collectives::algorithms::oktopk::Boundaries{0, 160, 170, 180, 1000}));
  // Quantile proposal: 8 selected indices, 4 regions -> idx[2], idx[4], idx[6].
  kernels::SparseVec sel;
  sel.idx = {1, 5, 9, 13, 20, 40, 80, 99};
  sel.val.assign(8, 1.0f);
  EXPECT_EQ(collectives::algorithms::oktopk::ProposeBoundaries(sel, 100, 4),
            (std::vector<uint32_t>{9, 20, 80}));
  status = RunRanks(2, [&](int rank, transport::Transport& t) -> absl::Status {
    collectives::CallContext ctx{&t, 42, 1, 0, transport::DeadlineIn(std::chrono::seconds(10))};
    collectives::PhaseTimes times;
    collectives::algorithms::oktopk::WireCount wire;
    collectives::Link link(ctx, collectives::wire::CatalogId("oktopk"), &times);
    std::vector<uint32_t> proposal = {rank == 1 ? 5000u : 10u};  // rank 1: beyond n
    return collectives::algorithms::oktopk::MeanBoundaryAgreement()
        .Agree(link, proposal, n, &times, &wire)
        .status();
  });
  for (const auto& s : status) EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
}

// A peer whose control word is not an integer half fails the call with
// DATA_LOSS, and the rank keeps grad + old residual.
TEST(OkTopkTest, BadControlWordFailsAndKeepsContribution) {
  auto t = transport::CreateLoopbackTransports(2);
  const size_t n = 1000;
  std::vector<float> grad = MakeGradient(5, 0, 0, n, Values::kGrid);
  std::vector<float> residual(n, 0.25f), expected(n);
  for (size_t i = 0; i < n; ++i) expected[i] = grad[i] + residual[i];
  // Rank 1's boundary word (m = 1: positions [2, 4)) with a half of 0.5.
  kernels::SparseVec bad;
  bad.idx = {2};
  bad.val = {0.5f};
  transport::Bytes msg;
  collectives::wire::AppendBlockFrame({42, 1, 0, collectives::wire::CatalogId("oktopk"),
                                       collectives::algorithms::oktopk::kOkPhaseBoundaries},
                                      {2, 4}, kernels::View(bad), &msg);
  ASSERT_TRUE(
      t[1]->PostSend(
              0, collectives::MessageTag(collectives::algorithms::oktopk::kOkPhaseBoundaries, 0, 0),
              msg)
          .ok());
  auto algo = collectives::algorithms::oktopk::CreateOkTopk();
  collectives::AllreduceResult result;
  collectives::CallStats stats;
  collectives::CallContext ctx{t[0].get(), 42, 1, 0,
                               transport::DeadlineIn(std::chrono::seconds(5))};
  absl::Status s = RunOrAbort(*algo, ctx, {0.01, 1}, grad, residual, &result, &stats);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_EQ(residual, expected);
}

// Bytes per rank against Table 1 (Ok-Topk sends at most 6k(P-1)/P words, an
// entry being 2 words) with counts at most 1.25k, on calls that reuse both
// thresholds; an exact global selection adds three histogram all-gathers
// (reported, not bounded here: the authors' exact refresh all-gathers every
// reduced value instead).
TEST(OkTopkTest, BytesWithinTableOneBound) {
  for (int p : {4, 8}) {
    const size_t n = 200003, k = catalog::KeepCount(0.01, n);
    collectives::AllreduceOptions opt;
    opt.density = 0.01;
    auto rec = RunNormal(collectives::algorithms::oktopk::ThresholdRule::kTracking, p, n, opt, 40);
    const double bound =
        8.0 * 3 * collectives::algorithms::oktopk::BandHigh(k) * (p - 1) / p + 48.0 * 6 * p;
    double worst = 0, worst_exact = 0;
    int reused = 0;
    for (int c = 1; c < 40; ++c) {
      if (rec[c][0].info.global.exact || rec[c][0].info.agreed) {
        for (const CallRecord& r : rec[c]) {
          worst_exact = std::max(worst_exact, double(r.stats.sent_bytes));
        }
        continue;
      }
      ++reused;
      for (const CallRecord& r : rec[c]) {
        worst = std::max(worst, double(r.stats.sent_bytes));
        EXPECT_LE(double(r.stats.sent_bytes), bound) << "P=" << p << " call " << c;
        EXPECT_LE(double(r.stats.recv_bytes), bound) << "P=" << p << " call " << c;
      }
    }
    EXPECT_GE(reused, 15);
    std::printf(
        "P=%d: most bytes sent by a rank %.0f on %d reuse calls, Table 1 bound at 1.25k %.0f "
        "(%.2f); with an exact global selection %.0f\n",
        p, worst, reused, bound, worst / bound, worst_exact);
  }
}

}  // namespace
}  // namespace gradex::testing
