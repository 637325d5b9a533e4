// A peer that sends bad frames, dies, or never shows makes the call fail with
// a clear error before its deadline; the failed rank keeps its whole
// contribution as residual.
#include <chrono>
#include <cstring>

#include "collectives/frame.h"
#include "collectives/link.h"
#include "collectives/spardl_family.h"
#include "gtest/gtest.h"
#include "tests/collectives/harness.h"
#include "transport/loopback_transport.h"

namespace gradex::testing {
namespace {

constexpr size_t kN = 1000;

struct Corruption {
  const char* name;
  void (*apply)(Bytes*);
  FrameError reason;
};

FrameHeader& Header(Bytes* b) { return *reinterpret_cast<FrameHeader*>(b->data()); }
uint32_t* Indices(Bytes* b) { return reinterpret_cast<uint32_t*>(b->data() + sizeof(FrameHeader)); }

// Rank 0 runs spardl on P = 2; rank 1 answers its SRS step with a corrupted
// copy of an honest frame.
TEST(FaultsTest, BadFramesAreRejectedAndResidualKept) {
  const Corruption cases[] = {
      {"magic", [](Bytes* b) { Header(b).magic = 0; }, FrameError::kBadMagic},
      {"epoch", [](Bytes* b) { Header(b).epoch = 99; }, FrameError::kWrongEpoch},
      {"index", [](Bytes* b) { Indices(b)[0] = 999; }, FrameError::kIndexOutOfRange},
      {"unsorted", [](Bytes* b) { Indices(b)[1] = Indices(b)[0]; }, FrameError::kUnsortedIndices},
      {"capacity", [](Bytes* b) { Header(b).count = 6; }, FrameError::kOverCapacity},
  };
  for (const Corruption& c : cases) {
    SCOPED_TRACE(c.name);
    auto t = CreateLoopbackTransports(2);
    std::vector<float> grad = MakeGradient(5, 0, 0, kN, Values::kGrid);
    std::vector<float> residual(kN, 0.25f), expected(kN);
    for (size_t i = 0; i < kN; ++i) expected[i] = grad[i] + residual[i];
    // Rank 1's honest SRS frame for block 0 ([0, 500), keep 5 at density 0.01).
    kernels::SparseVec honest;
    honest.idx = {1, 2, 3, 4, 5};
    honest.val = {1, 1, 1, 1, 1};
    Bytes bad;
    AppendBlockFrame({42, 1, 0, AlgorithmId::kSparDL, kPhaseSrs}, {0, 500}, kernels::View(honest),
                     &bad);
    c.apply(&bad);
    const uint64_t tag = MessageTag(kPhaseSrs, 0, 1);
    ASSERT_TRUE(t[1]->PostSend(0, tag, bad).ok());
    auto before = FrameErrorCounts()[static_cast<int>(c.reason)];
    auto algo = CreateAllreduce("spardl");
    ASSERT_TRUE(algo.ok());
    AllreduceResult result;
    CallStats stats;
    CallContext ctx{t[0].get(), 42, 1, 0, DeadlineIn(std::chrono::seconds(5))};
    absl::Status s = (*algo)->Run(ctx, {0.01, 1, 0}, grad, residual, &result, &stats);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_EQ(FrameErrorCounts()[static_cast<int>(c.reason)], before + 1);
    EXPECT_EQ(residual, expected);  // nothing lost, nothing added
  }
}

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

class PeerLossTest : public ::testing::TestWithParam<std::string> {};

// Rank 2 of 4 dies before the call: every survivor fails well before its
// deadline, the ones not talking to rank 2 too (a failed rank aborts its
// transport, which fails its peers' waits at once).
TEST_P(PeerLossTest, DeadPeerFailsEverySurvivorBeforeDeadline) {
  const int p = 4;
  auto start = Clock::now();
  const auto deadline = std::chrono::seconds(3);
  auto status = RunRanks(p, [&](int rank, Transport& t) -> absl::Status {
    if (rank == 2) {
      KillLoopbackRank(t, 2);
      return absl::OkStatus();
    }
    auto algo = CreateAllreduce(GetParam());
    if (!algo.ok()) return algo.status();
    std::vector<float> grad = MakeGradient(1, rank, 0, 10007, Values::kGrid);
    std::vector<float> residual(grad.size(), 0.0f);
    AllreduceResult result;
    CallStats stats;
    CallContext ctx{&t, 42, 1, 0, DeadlineIn(deadline)};
    absl::Status s = (*algo)->Run(ctx, {0.01, 2, 0}, grad, residual, &result, &stats);
    if (!s.ok() && residual != grad) return absl::InternalError("residual not restored");
    return s.ok() ? absl::InternalError("call succeeded without rank 2") : s;
  });
  for (int r = 0; r < p; ++r) {
    if (r == 2) continue;
    EXPECT_FALSE(status[r].ok());
    EXPECT_NE(status[r].code(), absl::StatusCode::kInternal) << status[r];
  }
  EXPECT_LT(Seconds(start), 1.5);
}

// Rank 3 of 4 never calls: a rank waiting on it times out at its deadline and
// aborts, which fails the others at once; nobody returns later than that.
TEST_P(PeerLossTest, AbsentPeerTimesOutAtDeadline) {
  const int p = 4;
  auto start = Clock::now();
  auto status = RunRanks(p, [&](int rank, Transport& t) -> absl::Status {
    if (rank == 3) return absl::OkStatus();
    auto algo = CreateAllreduce(GetParam());
    if (!algo.ok()) return algo.status();
    std::vector<float> grad = MakeGradient(1, rank, 0, 10007, Values::kGrid);
    std::vector<float> residual(grad.size(), 0.0f);
    AllreduceResult result;
    CallStats stats;
    CallContext ctx{&t, 42, 1, 0, DeadlineIn(std::chrono::milliseconds(800))};
    return (*algo)->Run(ctx, {0.01, 2, 0}, grad, residual, &result, &stats);
  });
  int timed_out = 0;
  for (int r = 0; r < 3; ++r) {
    EXPECT_FALSE(status[r].ok());
    timed_out += status[r].code() == absl::StatusCode::kDeadlineExceeded;
  }
  EXPECT_GE(timed_out, 1);
  EXPECT_LT(Seconds(start), 2.0);
}

INSTANTIATE_TEST_SUITE_P(Algorithms, PeerLossTest,
                         ::testing::Values("dense-ring", "spardl", "spardl-rsag", "spardl-bsag"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s) ch = ch == '-' ? '_' : ch;
                           return s;
                         });

}  // namespace
}  // namespace gradex::testing
