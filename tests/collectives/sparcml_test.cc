// SparCML family: the sparse stream's switch at δ, the volumes of ssar-rd,
// ssar-split, dsar-split and topkdsa against SparCML's cost model (the
// best and worst cases of Ok-Topk's Table 1 rows) on constructed selections,
// and QSGD on the dense phases (consistency, conservation, bytes).
#include <cmath>
#include <cstring>

#include "collectives/algorithms/sparcml_split.h"
#include "collectives/block_layout.h"
#include "collectives/link.h"
#include "collectives/wire/sparse_stream.h"
#include "gtest/gtest.h"
#include "tests/collectives/harness.h"
#include "transport/loopback_transport.h"

namespace gradex::testing {
namespace {

kernels::SparseVec Seq(uint32_t begin, uint32_t count, uint32_t stride = 1) {
  kernels::SparseVec v;
  for (uint32_t i = 0; i < count; ++i) {
    v.idx.push_back(begin + i * stride);
    v.val.push_back(1.0f + i);
  }
  return v;
}

uint16_t FlagsOf(const transport::Bytes& b) {
  collectives::wire::FrameHeader h;
  std::memcpy(&h, b.data(), sizeof h);
  return h.flags;
}

TEST(SparseStreamTest, DeltaIsHalfTheSegmentForFloatAndUint32) {
  EXPECT_EQ(collectives::wire::SparseStreamDelta(1000), 500.0);
  EXPECT_EQ(collectives::wire::SparseStreamDelta(1001), 500.5);
}

TEST(SparseStreamTest, SwitchesExactlyWhenEntriesPassDelta) {
  for (uint32_t size : {1000u, 1001u}) {
    SCOPED_TRACE(size);
    const uint32_t at_delta = size / 2;  // floor(δ): still sparse
    const collectives::wire::BlockRange range{10, 10 + size};
    collectives::wire::SparseStream s(range, collectives::wire::StreamPolicy::kDynamic);
    s.Assign(Seq(10, at_delta));
    EXPECT_FALSE(s.dense());
    s.Assign(Seq(10, at_delta + 1));
    EXPECT_TRUE(s.dense());
    // By a sum: at_delta entries plus one new index passes δ.
    s.Assign(Seq(10, at_delta, 2));  // even offsets (at most size/2 of them)
    EXPECT_FALSE(s.dense());
    s.Add(kernels::View(Seq(10 + 1, 1)));
    EXPECT_TRUE(s.dense());
    // A sum that adds no new index does not switch.
    s.Assign(Seq(10, at_delta));
    s.Add(kernels::View(Seq(10, at_delta)));
    EXPECT_FALSE(s.dense());
    // The wire form follows: same choice as AppendBlockFrame (FrameBytes).
    transport::Bytes sparse_frame, dense_frame, block_frame;
    kernels::SparseVec err;
    collectives::wire::SparseStream a(range, collectives::wire::StreamPolicy::kDynamic),
        b(range, collectives::wire::StreamPolicy::kDynamic);
    a.Assign(Seq(10, at_delta));
    b.Assign(Seq(10, at_delta + 1));
    EXPECT_EQ(a.AppendFrame({}, 0, 0, &sparse_frame, &err), at_delta);
    EXPECT_EQ(b.AppendFrame({}, 0, 0, &dense_frame, &err), collectives::wire::kDenseFrameMark);
    EXPECT_EQ(FlagsOf(sparse_frame), collectives::wire::kFrameSparse);
    EXPECT_EQ(FlagsOf(dense_frame), collectives::wire::kFrameDense);
    EXPECT_EQ(sparse_frame.size(), collectives::wire::FrameBytes(size, at_delta));
    EXPECT_EQ(dense_frame.size(), collectives::wire::FrameBytes(size, at_delta + 1));
    collectives::wire::AppendBlockFrame({}, range, kernels::View(Seq(10, at_delta + 1)),
                                        &block_frame);
    EXPECT_EQ(block_frame, dense_frame);
  }
}

TEST(SparseStreamTest, StaticNeverSwitchesAndDenseStaysDense) {
  collectives::wire::SparseStream s({0, 100}, collectives::wire::StreamPolicy::kStatic);
  s.Assign(Seq(0, 100));
  EXPECT_FALSE(s.dense());
  transport::Bytes b;
  kernels::SparseVec err;
  EXPECT_EQ(s.AppendFrame({}, 4, 0, &b, &err), 100u);
  EXPECT_EQ(FlagsOf(b), collectives::wire::kFrameSparse);
  collectives::wire::SparseStream d({0, 100}, collectives::wire::StreamPolicy::kDynamic);
  d.Assign(Seq(0, 60));
  kernels::SparseVec neg = Seq(0, 60);
  for (float& v : neg.val) v = -v;
  d.Add(kernels::View(neg));  // cancels to zero: SparCML switches one way
  EXPECT_TRUE(d.dense());
  kernels::SparseVec nz;
  d.NonZeros(&nz);
  EXPECT_EQ(nz.nnz(), 0u);
}

// One call of `algo` on P ranks where rank r's gradient is `grad(r)`.
std::vector<RankCall> RunOnce(const std::string& algo, int world, size_t n,
                              const collectives::AllreduceOptions& opt,
                              const std::function<std::vector<float>(int)>& grad) {
  std::vector<RankCall> calls(world);
  RunRanks(world, [&](int rank, transport::Transport& t) -> absl::Status {
    auto a = collectives::CreateAllreduce(algo);
    if (!a.ok()) return a.status();
    RankCall& c = calls[rank];
    c.grad = grad(rank);
    std::vector<float> residual(n, 0.0f);
    c.residual_in = residual;
    collectives::CallContext ctx{&t, 42, 1, 0, transport::DeadlineIn(std::chrono::seconds(20))};
    collectives::AllreduceResult result;
    c.status = RunOrAbort(**a, ctx, opt, c.grad, residual, &result, &c.stats);
    c.residual_out = residual;
    c.result.assign(n, 0.0f);
    result.ToDense(c.result);
    return c.status;
  });
  return calls;
}

// k large entries per rank on a uniform grid of gap n/k, shifted by `shift`
// (0 for every rank: full overlap; the rank: disjoint), small values elsewhere
// so the top-k is exactly the grid.
std::vector<float> GridGradient(size_t n, size_t k, int shift, int rank) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = static_cast<float>(((i * 7 + rank) % 5) + 1) / 64.0f;
  const size_t gap = n / k;
  for (size_t j = 0; j < k; ++j) g[j * gap + shift] = 100.0f + static_cast<float>(j + rank);
  return g;
}

struct Expect {
  uint64_t entries;  // COO entries sent, 8 bytes each
  uint64_t dense;    // float32 values sent in dense frames
  uint64_t frames;   // 48-byte headers
};

// SparCML's cost model (Ok-Topk Table 1 rows, in entries of 2 words) made
// exact for P | k and (n/P) | gap: best case (full overlap) and worst case
// (disjoint selections) per algorithm, bytes sent by one rank.
Expect Model(const std::string& algo, int p, size_t n, size_t k, bool overlap) {
  const int logp = catalog::CeilLog2(p);
  const uint64_t rs = k * (p - 1) / p;         // split reduce-scatter: k/P to each other rank
  const uint64_t slice = overlap ? k / p : k;  // entries of a reduced slice
  const uint64_t ag_frames = p - 1;            // Bruck forwards every other slice once
  if (algo == "sparcml-ssar-rd") {
    // Step j sends the sum of 2^j selections: k each (overlap), 2^j k (disjoint).
    return {overlap ? logp * k : (uint64_t(p) - 1) * k, 0, uint64_t(logp)};
  }
  if (algo == "sparcml-dsar-split") return {rs, (p - 1) * (n / p), uint64_t(p - 1) + ag_frames};
  // ssar-split and topkdsa while slices stay under δ = (n/P)/2.
  return {rs + (p - 1) * slice, 0, uint64_t(p - 1) + ag_frames};
}

TEST(SparcmlVolumeTest, BestAndWorstCasesOfTheCostModel) {
  const size_t n = 1 << 16;
  for (int p : {2, 4, 8}) {
    for (bool overlap : {true, false}) {
      for (const std::string algo :
           {"sparcml-ssar-rd", "sparcml-ssar-split", "sparcml-dsar-split", "topkdsa"}) {
        const size_t k = 512;
        SCOPED_TRACE(algo + " P=" + std::to_string(p) + (overlap ? " overlap" : " disjoint"));
        collectives::AllreduceOptions opt;
        opt.density = double(k) / n;
        auto calls =
            RunOnce(algo, p, n, opt, [&](int r) { return GridGradient(n, k, overlap ? 0 : r, r); });
        const Expect e = Model(algo, p, n, k, overlap);
        for (const RankCall& c : calls) {
          ASSERT_TRUE(c.status.ok()) << c.status;
          EXPECT_EQ(c.stats.sent_bytes, 8 * e.entries + 4 * e.dense + 48 * e.frames);
        }
        EXPECT_TRUE(Consistent(calls));
        EXPECT_EQ(ConservationError(calls, false), 0.0);
      }
    }
  }
}

TEST(SparcmlVolumeTest, TopkDsaSlicesGoDenseOnlyPastDelta) {
  // P = 4, n = 4096: a reduced slice of disjoint selections has k entries out
  // of 1024; δ = 512. k = 512 stays sparse, k = 1024 goes dense.
  const size_t n = 4096;
  const int p = 4;
  for (size_t k : {size_t{512}, size_t{1024}}) {
    collectives::AllreduceOptions opt;
    opt.density = double(k) / n;
    auto calls = RunOnce("topkdsa", p, n, opt, [&](int r) { return GridGradient(n, k, r, r); });
    for (const RankCall& c : calls) {
      ASSERT_TRUE(c.status.ok()) << c.status;
      // The first all-gather frame is this rank's own reduced slice.
      const uint64_t own = c.stats.stream_frames_sent[p - 1];
      if (k == 512) {
        EXPECT_EQ(own, 512u);
      } else {
        EXPECT_EQ(own, collectives::wire::kDenseFrameMark);
      }
    }
    EXPECT_TRUE(Consistent(calls));
  }
}

// QSGD on the dense phases: every rank ends with the same bits, and the
// quantization error is fed back into the residual of the rank that
// quantized, so conservation holds up to float rounding (relative 1e-6).
TEST(SparcmlQuantizedTest, ConsistentConservingAndSmaller) {
  for (const std::string algo : {"sparcml-dsar-split", "topkdsa"}) {
    for (int bits : {2, 4, 8}) {
      for (int p : {1, 2, 3, 4, 5, 8, 9}) {
        SCOPED_TRACE(algo + " bits=" + std::to_string(bits) + " P=" + std::to_string(p));
        // Density 0.4 makes topkdsa's reduced slices dense too (fill-in).
        collectives::AllreduceOptions opt;
        opt.density = algo == "topkdsa" ? 0.4 : 0.05;
        opt.params["quantize_bits"] = bits;
        auto runs = RunAlgorithm(algo, p, 10007, opt, 3, Values::kGrid, 5);
        opt.params["quantize_bits"] = 0;
        auto plain = RunAlgorithm(algo, p, 10007, opt, 1, Values::kGrid, 5);
        auto model_algo = collectives::CreateAllreduce(algo);
        ASSERT_TRUE(model_algo.ok());
        for (auto& calls : runs) {
          for (const RankCall& c : calls) ASSERT_TRUE(c.status.ok()) << c.status;
          EXPECT_TRUE(Consistent(calls));
          EXPECT_LE(ConservationError(calls, true), 1e-6);
        }
        opt.params["quantize_bits"] = bits;
        for (int r = 0; r < p; ++r) {
          const collectives::CallStats& s = runs[0][r].stats;
          auto model = (*model_algo)->ModelVolume(r, p, 10007, opt, s);
          ASSERT_TRUE(model.ok()) << model.status();
          EXPECT_EQ(s.sent_bytes, model->sent_bytes);
          EXPECT_EQ(s.recv_bytes, model->recv_bytes);
          if (p > 1) {
            EXPECT_LT(s.sent_bytes, plain[0][r].stats.sent_bytes);
          }
        }
        if (p == 1) continue;
        // The quantized result differs from the exact one (it is quantized).
        EXPECT_NE(runs[0][0].result, plain[0][0].result);
      }
    }
  }
}

TEST(SparcmlQuantizedTest, TinyGradientsWithEmptySlices) {
  for (const std::string algo : {"sparcml-dsar-split", "topkdsa"}) {
    for (int p = 1; p <= 9; ++p) {
      for (size_t n : {size_t{1}, size_t{3}}) {
        SCOPED_TRACE(algo + " P=" + std::to_string(p) + " N=" + std::to_string(n));
        collectives::AllreduceOptions opt;
        opt.density = 1.0;
        opt.params["quantize_bits"] = 2;
        auto runs = RunAlgorithm(algo, p, n, opt, 2, Values::kGrid, 9);
        for (auto& calls : runs) {
          for (const RankCall& c : calls) ASSERT_TRUE(c.status.ok()) << c.status;
          EXPECT_TRUE(Consistent(calls));
          EXPECT_LE(ConservationError(calls, true), 1e-6);
        }
      }
    }
  }
}

TEST(SparcmlQuantizedTest, StaticAlgorithmsHaveNoDensePhaseToQuantize) {
  for (const std::string algo : {"sparcml-ssar-rd", "sparcml-ssar-split"}) {
    collectives::AllreduceOptions opt;
    opt.density = 0.3;
    opt.params["quantize_bits"] = 4;
    auto q = RunAlgorithm(algo, 4, 5003, opt, 1, Values::kGrid, 2);
    opt.params["quantize_bits"] = 0;
    auto plain = RunAlgorithm(algo, 4, 5003, opt, 1, Values::kGrid, 2);
    for (int r = 0; r < 4; ++r) EXPECT_EQ(q[0][r].result, plain[0][r].result) << algo;
  }
}

TEST(SparcmlQuantizedTest, BadBitsFailBeforeTouchingTheResidual) {
  for (const std::string algo : {"sparcml-dsar-split", "topkdsa", "sparcml-ssar-split"}) {
    collectives::AllreduceOptions opt;
    opt.params["quantize_bits"] = 3;
    auto runs = RunAlgorithm(algo, 2, 100, opt, 1, Values::kGrid, 2);
    for (const RankCall& c : runs[0]) {
      EXPECT_EQ(c.status.code(), absl::StatusCode::kInvalidArgument) << algo;
      EXPECT_EQ(c.residual_out, c.residual_in);
    }
  }
}

// A forged dense frame with more nonzeros than the sender can have selected is
// rejected (a dense frame carries no count for the frame layer to check).
TEST(SparcmlFaultsTest, DenseFrameOverCapacityIsRejected) {
  const size_t n = 1000;
  auto t = transport::CreateLoopbackTransports(2);
  std::vector<float> grad = MakeGradient(5, 0, 0, n, Values::kGrid);
  std::vector<float> residual(n, 0.25f), expected(n);
  for (size_t i = 0; i < n; ++i) expected[i] = grad[i] + residual[i];
  std::vector<float> forged(500, 1.0f);  // slice [0, 500): keep count is 10
  transport::Bytes bad;
  collectives::wire::AppendDenseFrame({42, 1, 0, collectives::wire::CatalogId("sparcml-dsar-split"),
                                       collectives::algorithms::kPhaseSplitScatter, /*sender=*/1},
                                      {0, 500}, forged.data(), &bad);
  ASSERT_TRUE(
      t[1]->PostSend(0, collectives::MessageTag(collectives::algorithms::kPhaseSplitScatter, 0, 1),
                     bad)
          .ok());
  auto algo = collectives::CreateAllreduce("sparcml-dsar-split");
  ASSERT_TRUE(algo.ok());
  collectives::AllreduceResult result;
  collectives::CallStats stats;
  collectives::AllreduceOptions opt;
  opt.density = 0.01;
  collectives::CallContext ctx{t[0].get(), 42, 1, 0,
                               transport::DeadlineIn(std::chrono::seconds(5))};
  absl::Status s = RunOrAbort(**algo, ctx, opt, grad, residual, &result, &stats);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(std::string(s.message()).find("over_capacity"), std::string::npos) << s;
  EXPECT_EQ(residual, expected);
}

}  // namespace
}  // namespace gradex::testing
