// Algorithm-specific checks of the peer algorithms (dense-rabenseifner, topka,
// gaussiank, gtopk), beyond the shared invariant sweep and dead-peer suite.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "collectives/block_layout.h"
#include "collectives/link.h"
#include "collectives/wire/frame.h"
#include "gtest/gtest.h"
#include "kernels/sparse.h"
#include "tests/collectives/harness.h"
#include "transport/loopback_transport.h"

namespace gradex::testing {
namespace {

int FloorPow2(int p) {
  int p2 = 1;
  while (p2 * 2 <= p) p2 *= 2;
  return p2;
}

int Log2(int p2) {
  int l = 0;
  while ((1 << l) < p2) ++l;
  return l;
}

// Integer gradients sum exactly in any order, so Rabenseifner's result must be
// dense-ring's bit for bit, including N < P (empty blocks).
TEST(DenseRabenseifnerTest, EqualsDenseRingOnIntegers) {
  for (int p = 1; p <= 9; ++p) {
    for (size_t n : {size_t{10007}, size_t{5}, size_t{1}}) {
      SCOPED_TRACE("P=" + std::to_string(p) + " N=" + std::to_string(n));
      auto mine = RunAlgorithm("dense-rabenseifner", p, n, {0.01, 1}, 2, Values::kIntegers, 9);
      auto ring = RunAlgorithm("dense-ring", p, n, {0.01, 1}, 2, Values::kIntegers, 9);
      for (int it = 0; it < 2; ++it) {
        for (int r = 0; r < p; ++r) {
          ASSERT_TRUE(mine[it][r].status.ok()) << mine[it][r].status;
          EXPECT_EQ(mine[it][r].result, ring[it][r].result);
          EXPECT_EQ(mine[it][r].stats.result_capacity, n);
        }
      }
    }
  }
}

// Bytes per rank are the closed form 2(p2-1)/p2 * 4n plus one 48-byte header
// per message (2 log2 p2 messages), and a folded pair moves the whole gradient
// (4n + 48) once more each way. n divisible by every p2 makes it exact.
TEST(DenseRabenseifnerTest, BytesAreTheClosedForm) {
  const size_t n = 8 * 1250;
  for (int p = 1; p <= 9; ++p) {
    SCOPED_TRACE("P=" + std::to_string(p));
    auto runs = RunAlgorithm("dense-rabenseifner", p, n, {0.01, 1}, 1, Values::kGrid, 3);
    const int p2 = FloorPow2(p), r = p - p2;
    const uint64_t active = 2 * (p2 - 1) * 4 * n / p2 + 48 * 2 * Log2(p2);
    const uint64_t whole = 4 * n + 48;
    for (int rank = 0; rank < p; ++rank) {
      const collectives::CallStats& s = runs[0][rank].stats;
      ASSERT_TRUE(runs[0][rank].status.ok());
      uint64_t want = active;
      uint64_t messages = 2 * Log2(p2);
      if (rank < 2 * r && rank % 2 == 0) {
        want = whole, messages = 1;
      } else if (rank < 2 * r) {
        want += whole, messages += 1;
      }
      EXPECT_EQ(s.sent_bytes, want) << "rank " << rank;
      EXPECT_EQ(s.recv_bytes, want) << "rank " << rank;
      EXPECT_EQ(s.messages_sent, messages) << "rank " << rank;
    }
  }
}

// The exact sum of every rank's exact top-k of gradient + residual_in (the
// selection rule of kernels/sparse.h), as dense.
std::vector<float> SumOfLocalTopK(const std::vector<RankCall>& calls, size_t k) {
  const size_t n = calls[0].grad.size();
  std::vector<float> sum(n, 0.0f);
  for (const RankCall& c : calls) {
    std::vector<float> acc(n);
    for (size_t i = 0; i < n; ++i) acc[i] = c.grad[i] + c.residual_in[i];
    kernels::SparseVec sel;
    kernels::SelectTopK(acc.data(), n, k, 0, &sel);
    for (size_t j = 0; j < sel.nnz(); ++j) sum[sel.idx[j]] += sel.val[j];
  }
  return sum;
}

// topka's result is the sum of the P exact local top-k selections (integers:
// exact in any order), every rank selects k, the result has at most min(n, Pk)
// non-zeros, and each rank moves (P-1) selections of k entries each way.
TEST(TopkATest, SumsTheLocalTopKAndMovesPMinusOneSelections) {
  for (int p : {1, 2, 3, 5, 8, 9}) {
    for (double d : {0.001, 0.01, 0.1}) {
      SCOPED_TRACE("P=" + std::to_string(p) + " density=" + std::to_string(d));
      const size_t n = 20011, k = catalog::KeepCount(d, n);
      auto runs = RunAlgorithm("topka", p, n, {d, 1}, 3, Values::kIntegers, 5);
      for (const auto& calls : runs) {
        std::vector<float> want = SumOfLocalTopK(calls, k);
        for (const RankCall& c : calls) {
          ASSERT_TRUE(c.status.ok()) << c.status;
          EXPECT_EQ(c.result, want);
          EXPECT_EQ(c.stats.Detail("local_selected"), k);
          EXPECT_EQ(c.stats.result_capacity, std::min(n, p * k));
          EXPECT_LE(c.stats.result_nnz, c.stats.result_capacity);
          const uint64_t bytes = uint64_t(p - 1) * (48 + 8 * k);
          EXPECT_EQ(c.stats.sent_bytes, bytes);
          EXPECT_EQ(c.stats.recv_bytes, bytes);
          EXPECT_EQ(c.stats.messages_sent, Log2(p));  // Bruck: ceil(log2 P) messages
        }
      }
    }
  }
}

// One call of `algorithm` on P = grads.size() ranks with the given gradients
// and zero residuals.
std::vector<RankCall> RunWith(const std::string& algorithm,
                              const std::vector<std::vector<float>>& grads,
                              const collectives::AllreduceOptions& options) {
  const int p = static_cast<int>(grads.size());
  std::vector<RankCall> calls(p);
  RunRanks(p, [&](int rank, transport::Transport& t) -> absl::Status {
    auto algo = collectives::CreateAllreduce(algorithm);
    if (!algo.ok()) return algo.status();
    RankCall& c = calls[rank];
    c.grad = grads[rank];
    c.residual_in.assign(c.grad.size(), 0.0f);
    std::vector<float> residual = c.residual_in;
    collectives::CallContext ctx{&t, 42, 1, 0, transport::DeadlineIn(std::chrono::seconds(20))};
    collectives::AllreduceResult result;
    c.status = RunOrAbort(**algo, ctx, options, c.grad, residual, &result, &c.stats);
    c.residual_out = residual;
    c.result.assign(c.grad.size(), 0.0f);
    result.ToDense(c.result);
    return c.status;
  });
  return calls;
}

// What one rank selected: the entries of grad + residual_in that it zeroed.
// Checks that the selection is a magnitude threshold (nothing left behind is
// larger than anything taken) and returns its size.
size_t CheckThresholdSelection(const RankCall& c) {
  float min_taken = INFINITY, max_left = 0;
  size_t taken = 0;
  for (size_t i = 0; i < c.grad.size(); ++i) {
    const float acc = c.grad[i] + c.residual_in[i];
    if (acc == 0.0f) continue;
    if (c.residual_out[i] == 0.0f) {
      ++taken;
      min_taken = std::min(min_taken, std::fabs(acc));
    } else {
      EXPECT_EQ(c.residual_out[i], acc);
      max_left = std::max(max_left, std::fabs(acc));
    }
  }
  if (taken > 0) {
    EXPECT_GE(min_taken, max_left);
  }
  return taken;
}

// On normal-like data with residuals building up over calls, every rank
// selects between ceil(3k/4) and 2k entries, by a magnitude threshold.
TEST(GaussianKTest, SelectsBetweenThreeQuartersKAndTwoKOnNormalData) {
  const size_t n = 100003;
  for (int p : {1, 4, 9}) {
    for (double d : {0.001, 0.01, 0.1}) {
      SCOPED_TRACE("P=" + std::to_string(p) + " density=" + std::to_string(d));
      const size_t k = catalog::KeepCount(d, n);
      auto runs = RunAlgorithm("gaussiank", p, n, {d, 1}, 6, Values::kGrid, 13);
      double ratio = 0;
      for (const auto& calls : runs) {
        for (const RankCall& c : calls) {
          ASSERT_TRUE(c.status.ok()) << c.status;
          EXPECT_EQ(CheckThresholdSelection(c), c.stats.Detail("local_selected"));
          EXPECT_GE(4 * c.stats.Detail("local_selected"), 3 * k);
          EXPECT_LE(c.stats.Detail("local_selected"), 2 * k);
          EXPECT_LE(c.stats.result_nnz, std::min(n, 2 * k * p));
          ratio += double(c.stats.Detail("local_selected")) / k / (p * runs.size());
        }
      }
      std::printf("gaussiank P=%d density=%g: mean selected/k = %.3f\n", p, d, ratio);
    }
  }
}

// Uniform integers in [-8, 8] are far from normal: the fitted threshold
// passes a quarter of the values, and the cap keeps 2k of them.
TEST(GaussianKTest, CapsAtTwoKOnIntegers) {
  const size_t n = 20011;
  for (double d : {0.001, 0.01}) {
    const size_t k = catalog::KeepCount(d, n);
    auto runs = RunAlgorithm("gaussiank", 3, n, {d, 1}, 2, Values::kIntegers, 2);
    for (const auto& calls : runs) {
      for (const RankCall& c : calls) {
        ASSERT_TRUE(c.status.ok()) << c.status;
        EXPECT_EQ(CheckThresholdSelection(c), 2 * k);
        EXPECT_EQ(c.stats.Detail("local_selected"), 2 * k);
      }
    }
  }
}

// One huge outlier inflates the fitted deviation so much that halving the
// threshold 5 times passes almost nothing: the rank falls back to the exact
// top-k and still sends k entries.
TEST(GaussianKTest, FallsBackToExactTopKWhenTheFitIsFarOff) {
  const size_t n = 10007;
  std::vector<std::vector<float>> grads;
  for (int r = 0; r < 2; ++r) {
    grads.push_back(MakeGradient(4, r, 0, n, Values::kGrid));
    grads.back()[17] = 1e30f;
  }
  auto calls = RunWith("gaussiank", grads, {0.01, 1});
  for (const RankCall& c : calls) {
    ASSERT_TRUE(c.status.ok()) << c.status;
    EXPECT_EQ(c.stats.Detail("local_selected"), catalog::KeepCount(0.01, n));
    EXPECT_EQ(CheckThresholdSelection(c), c.stats.Detail("local_selected"));
    EXPECT_EQ(c.result[17], 2e30f);
  }
}

// gtopk by its definition: local top-k, then pairs summed and cut to the top
// k up a binomial tree (after the fold for P not a power of two).
std::vector<float> GTopkReference(const std::vector<RankCall>& calls, size_t k) {
  const int p = static_cast<int>(calls.size());
  const size_t n = calls[0].grad.size();
  std::vector<kernels::SparseVec> held(p);
  for (int r = 0; r < p; ++r) {
    std::vector<float> acc(n);
    for (size_t i = 0; i < n; ++i) acc[i] = calls[r].grad[i] + calls[r].residual_in[i];
    kernels::SelectTopK(acc.data(), n, k, 0, &held[r]);
  }
  auto combine = [k](const kernels::SparseVec& a, const kernels::SparseVec& b) {
    kernels::SparseVec sum, top;
    kernels::MergeAdd(kernels::View(a), kernels::View(b), &sum);
    kernels::SparseTopK(kernels::View(sum), k, &top, nullptr);
    return top;
  };
  const int p2 = FloorPow2(p), r = p - p2;
  std::vector<kernels::SparseVec> active;
  for (int i = 0; i < p2; ++i)
    active.push_back(i < r ? combine(held[2 * i + 1], held[2 * i]) : held[i + r]);
  for (int d = 1; d < p2; d *= 2) {
    for (int i = 0; i < p2; i += 2 * d) active[i] = combine(active[i], active[i + d]);
  }
  std::vector<float> out(n, 0.0f);
  kernels::SparseToDense(kernels::View(active[0]), 0, out.data(), n);
  return out;
}

// gtopk equals its definition on integers, has at most k non-zeros, and the
// root (global rank 0, or 1 after a fold) moves 2 log2(p2) messages of k
// entries; over all ranks every tree edge carries k entries twice.
TEST(GTopkTest, MatchesTheTreeDefinitionAndTwoLogPKAtTheRoot) {
  const size_t n = 20011;
  for (int p = 1; p <= 9; ++p) {
    for (double d : {0.001, 0.01, 0.1}) {
      SCOPED_TRACE("P=" + std::to_string(p) + " density=" + std::to_string(d));
      const size_t k = catalog::KeepCount(d, n);
      auto runs = RunAlgorithm("gtopk", p, n, {d, 1}, 3, Values::kIntegers, 21);
      const int p2 = FloorPow2(p), r = p - p2, root = r > 0 ? 1 : 0;
      const uint64_t msg = 48 + 8 * k;
      for (const auto& calls : runs) {
        const std::vector<float> want = GTopkReference(calls, k);
        uint64_t total_sent = 0;
        for (const RankCall& c : calls) {
          ASSERT_TRUE(c.status.ok()) << c.status;
          EXPECT_EQ(c.result, want);
          EXPECT_EQ(c.stats.result_capacity, k);
          EXPECT_LE(c.stats.result_nnz, k);
          total_sent += c.stats.sent_bytes;
        }
        const collectives::CallStats& s = calls[root].stats;
        const uint64_t fold = r > 0 ? msg : 0;
        EXPECT_EQ(s.sent_bytes, Log2(p2) * msg + fold);
        EXPECT_EQ(s.recv_bytes, Log2(p2) * msg + fold);
        EXPECT_EQ(total_sent, (2 * (p2 - 1) + 2 * r) * msg);
      }
    }
  }
}

// A dense frame carries no count, so the frame layer cannot hold it to the
// sender's capacity. Where it is longer than the schedule's message (k
// entries as COO: density 0.01), the receive's cap refuses it at the
// transport naming the peer; where a dense frame is the
// shorter encoding of k entries (density 0.6), it arrives, and topka and
// gtopk count its nonzeros themselves and reject a peer that sends more than
// it may. P = 2, rank 1 forged by the test; the residual is kept either way.
TEST(PeerFramesTest, DenseFrameOverCapacityIsRejectedAndResidualKept) {
  struct Case {
    const char* algo;
    collectives::wire::AlgorithmId id;
    uint16_t phase;  // topka's all-gather, gtopk's reduction
    double density;
    absl::StatusCode code;
  };
  const absl::StatusCode refused = absl::StatusCode::kResourceExhausted;
  const absl::StatusCode counted = absl::StatusCode::kDataLoss;
  for (const Case& c : {Case{"topka", collectives::wire::CatalogId("topka"), 1, 0.01, refused},
                        Case{"gtopk", collectives::wire::CatalogId("gtopk"), 2, 0.01, refused},
                        Case{"topka", collectives::wire::CatalogId("topka"), 1, 0.6, counted},
                        Case{"gtopk", collectives::wire::CatalogId("gtopk"), 2, 0.6, counted}}) {
    SCOPED_TRACE(std::string(c.algo) + " at density " + std::to_string(c.density));
    const size_t n = 1000;
    auto t = transport::CreateLoopbackTransports(2);
    std::vector<float> ones(n, 1.0f);
    transport::Bytes bad;
    collectives::wire::AppendDenseFrame({42, 1, 0, c.id, c.phase, 1}, {0, uint32_t(n)}, ones.data(),
                                        &bad);
    ASSERT_TRUE(t[1]->PostSend(0, collectives::MessageTag(c.phase, 0, 0), bad).ok());
    std::vector<float> grad = MakeGradient(5, 0, 0, n, Values::kGrid);
    std::vector<float> residual(n, 0.5f), expected(n);
    for (size_t i = 0; i < n; ++i) expected[i] = grad[i] + residual[i];
    auto algo = collectives::CreateAllreduce(c.algo);
    ASSERT_TRUE(algo.ok());
    collectives::AllreduceResult result;
    collectives::CallStats stats;
    collectives::CallContext ctx{t[0].get(), 42, 1, 0,
                                 transport::DeadlineIn(std::chrono::seconds(5))};
    absl::Status s = RunOrAbort(**algo, ctx, {c.density, 1}, grad, residual, &result, &stats);
    EXPECT_EQ(s.code(), c.code) << s;
    if (c.code == refused) {
      EXPECT_NE(s.message().find("peer 1 sent"), std::string::npos) << s;
      EXPECT_EQ(t[0]->counters(1).refused_messages, 1u);
    }
    EXPECT_EQ(residual, expected);
  }
}

}  // namespace
}  // namespace gradex::testing
