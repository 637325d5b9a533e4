// A peer that sends bad frames makes the call fail with a clear error; the
// failed rank keeps its whole contribution as residual. (A peer that dies or
// never shows: dead_peer_test.cc, for every algorithm and fabric.)
#include <chrono>
#include <cstring>

#include "collectives/algorithms/spardl_family.h"
#include "collectives/link.h"
#include "collectives/wire/frame.h"
#include "gtest/gtest.h"
#include "tests/collectives/harness.h"
#include "transport/loopback_transport.h"

namespace gradex::testing {
namespace {

constexpr size_t kN = 1000;

struct Corruption {
  const char* name;
  void (*apply)(transport::Bytes*);
  collectives::wire::FrameError reason;
};

collectives::wire::FrameHeader& Header(transport::Bytes* b) {
  return *reinterpret_cast<collectives::wire::FrameHeader*>(b->data());
}
uint32_t* Indices(transport::Bytes* b) {
  return reinterpret_cast<uint32_t*>(b->data() + sizeof(collectives::wire::FrameHeader));
}

// Rank 0 runs spardl on P = 2; rank 1 answers its SRS step with a corrupted
// copy of an honest frame.
TEST(FaultsTest, BadFramesAreRejectedAndResidualKept) {
  const Corruption cases[] = {
      {"magic", [](transport::Bytes* b) { Header(b).magic = 0; },
       collectives::wire::FrameError::kBadMagic},
      {"epoch", [](transport::Bytes* b) { Header(b).epoch = 99; },
       collectives::wire::FrameError::kWrongEpoch},
      {"index", [](transport::Bytes* b) { Indices(b)[0] = 999; },
       collectives::wire::FrameError::kIndexOutOfRange},
      {"unsorted", [](transport::Bytes* b) { Indices(b)[1] = Indices(b)[0]; },
       collectives::wire::FrameError::kUnsortedIndices},
      {"capacity", [](transport::Bytes* b) { Header(b).count = 6; },
       collectives::wire::FrameError::kOverCapacity},
  };
  for (const Corruption& c : cases) {
    SCOPED_TRACE(c.name);
    auto t = transport::CreateLoopbackTransports(2);
    std::vector<float> grad = MakeGradient(5, 0, 0, kN, Values::kGrid);
    std::vector<float> residual(kN, 0.25f), expected(kN);
    for (size_t i = 0; i < kN; ++i) expected[i] = grad[i] + residual[i];
    // Rank 1's honest SRS frame for block 0 ([0, 500), keep 5 at density 0.01).
    kernels::SparseVec honest;
    honest.idx = {1, 2, 3, 4, 5};
    honest.val = {1, 1, 1, 1, 1};
    transport::Bytes bad;
    collectives::wire::AppendBlockFrame({42, 1, 0, collectives::wire::CatalogId("spardl"),
                                         collectives::algorithms::kPhaseSrs, /*sender=*/1},
                                        {0, 500}, kernels::View(honest), &bad);
    c.apply(&bad);
    const uint64_t tag = collectives::MessageTag(collectives::algorithms::kPhaseSrs, 0, 1);
    ASSERT_TRUE(t[1]->PostSend(0, tag, bad).ok());
    auto before = collectives::wire::FrameErrorCounts()[static_cast<int>(c.reason)];
    auto algo = collectives::CreateAllreduce("spardl");
    ASSERT_TRUE(algo.ok());
    collectives::AllreduceResult result;
    collectives::CallStats stats;
    collectives::CallContext ctx{t[0].get(), 42, 1, 0,
                                 transport::DeadlineIn(std::chrono::seconds(5))};
    absl::Status s = RunOrAbort(**algo, ctx, {0.01, 1}, grad, residual, &result, &stats);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_EQ(collectives::wire::FrameErrorCounts()[static_cast<int>(c.reason)], before + 1);
    EXPECT_EQ(residual, expected);  // nothing lost, nothing added
  }
}

// A peer announcing a message longer than any the call can carry
// (MessageBound: every rank's whole bucket as COO) is refused at the receive,
// never allocated at its length; the rank keeps its whole contribution.
TEST(FaultsTest, AMessageBeyondTheCallsBoundIsRefusedNamingThePeer) {
  auto t = transport::CreateLoopbackTransports(2);
  std::vector<float> grad = MakeGradient(5, 0, 0, kN, Values::kGrid);
  std::vector<float> residual(kN, 0.25f), expected(kN);
  for (size_t i = 0; i < kN; ++i) expected[i] = grad[i] + residual[i];
  const size_t bound = collectives::MessageBound(kN, 2);
  ASSERT_GT(bound, 2 * 8 * kN);  // honest traffic fits
  ASSERT_TRUE(t[1]->PostSend(0, collectives::MessageTag(collectives::algorithms::kPhaseSrs, 0, 1),
                             transport::Bytes(bound + 1, 0))
                  .ok());
  auto algo = collectives::CreateAllreduce("spardl");
  ASSERT_TRUE(algo.ok());
  collectives::AllreduceResult result;
  collectives::CallStats stats;
  collectives::CallContext ctx{t[0].get(), 42, 1, 0,
                               transport::DeadlineIn(std::chrono::seconds(5))};
  absl::Status s = RunOrAbort(**algo, ctx, {0.01, 1}, grad, residual, &result, &stats);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("peer 1"), std::string::npos) << s.message();
  EXPECT_EQ(t[0]->counters(1).refused_messages, 1u);
  EXPECT_EQ(residual, expected);
}

// Where the schedule knows what a message holds (its blocks and their
// capacities), the receive is capped there, far below the call's bound: a
// peer's message one byte over it is refused at the receive naming the peer
// (before: received, up to MessageBound, and handed to the decoder).
// Rank 0 runs `algorithm` on P = 2; rank 1 answers its first receive (tag of
// `phase`, sub `sub`) with `bound` + 1 bytes.
void ExpectRefusedOverTheSchedulesBound(const char* algorithm, uint16_t phase, uint32_t sub,
                                        size_t bound) {
  SCOPED_TRACE(algorithm);
  auto t = transport::CreateLoopbackTransports(2);
  std::vector<float> grad = MakeGradient(5, 0, 0, kN, Values::kGrid);
  std::vector<float> residual(kN, 0.25f), expected(kN);
  for (size_t i = 0; i < kN; ++i) expected[i] = grad[i] + residual[i];
  ASSERT_LT(bound + 1, collectives::MessageBound(kN, 2));  // the call's bound would take it
  ASSERT_TRUE(
      t[1]->PostSend(0, collectives::MessageTag(phase, 0, sub), transport::Bytes(bound + 1, 0))
          .ok());
  auto algo = collectives::CreateAllreduce(algorithm);
  ASSERT_TRUE(algo.ok());
  collectives::AllreduceResult result;
  collectives::CallStats stats;
  collectives::CallContext ctx{t[0].get(), 42, 1, 0,
                               transport::DeadlineIn(std::chrono::seconds(5))};
  absl::Status s = RunOrAbort(**algo, ctx, {0.01, 1}, grad, residual, &result, &stats);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("peer 1 sent " + std::to_string(bound + 1) + " bytes"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(t[0]->counters(1).refused_messages, 1u);
  EXPECT_EQ(residual, expected);
}

TEST(FaultsTest, AMessageOverTheSchedulesBoundIsRefusedNamingThePeer) {
  // SparDL's SRS step 1 on P = 2: one block of kN / 2 elements keeping
  // ceil(0.01 * 500) = 5 entries, as a sparse frame.
  ExpectRefusedOverTheSchedulesBound("spardl", collectives::algorithms::kPhaseSrs, 1,
                                     sizeof(collectives::wire::FrameHeader) + 5 * 8);
  // The dense ring's first reduce-scatter step (phase 1, sub 0): one dense
  // frame of block 1, kN / 2 floats.
  ExpectRefusedOverTheSchedulesBound("dense-ring", 1, 0,
                                     sizeof(collectives::wire::FrameHeader) + kN / 2 * 4);
}

}  // namespace
}  // namespace gradex::testing
