// Bad frames are an error Status and a counter, never a crash or a wrong sum.
#include "collectives/wire/frame.h"

#include <cmath>
#include <cstring>

#include "collectives/link.h"
#include "gtest/gtest.h"

namespace gradex {
namespace {

const collectives::wire::FrameMeta kMeta{7, 3, 11, collectives::wire::CatalogId("spardl"), 1};
const collectives::wire::BlockRange kRange{100, 200};
const collectives::wire::ExpectedBlock kExpect{kRange, 10};

transport::Bytes GoodFrame() {
  kernels::SparseVec v;
  v.idx = {100, 150, 199};
  v.val = {1.5f, -2.0f, 3.0f};
  transport::Bytes b;
  collectives::wire::AppendBlockFrame(kMeta, kRange, kernels::View(v), &b);
  return b;
}

collectives::wire::FrameHeader HeaderOf(const transport::Bytes& b) {
  collectives::wire::FrameHeader h;
  std::memcpy(&h, b.data(), sizeof h);
  return h;
}
void SetHeader(transport::Bytes* b, const collectives::wire::FrameHeader& h) {
  std::memcpy(b->data(), &h, sizeof h);
}
uint32_t* Indices(transport::Bytes* b) {
  return reinterpret_cast<uint32_t*>(b->data() + sizeof(collectives::wire::FrameHeader));
}

// Decodes `b` and expects a DataLoss naming `reason`, with its counter bumped.
void ExpectRejected(const transport::Bytes& b, collectives::wire::FrameError reason) {
  auto before = collectives::wire::FrameErrorCounts()[static_cast<int>(reason)];
  std::vector<kernels::SparseVec> out;
  absl::Status s = collectives::wire::DecodeSparseBlocks(b, kMeta, {&kExpect, 1}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(std::string(s.message()).find(collectives::wire::FrameErrorName(reason)),
            std::string::npos)
      << s;
  EXPECT_EQ(collectives::wire::FrameErrorCounts()[static_cast<int>(reason)], before + 1);
}

TEST(FrameTest, RoundTripSparse) {
  std::vector<kernels::SparseVec> out;
  ASSERT_TRUE(collectives::wire::DecodeSparseBlocks(GoodFrame(), kMeta, {&kExpect, 1}, &out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].idx, (std::vector<uint32_t>{100, 150, 199}));
  EXPECT_EQ(out[0].val, (std::vector<float>{1.5f, -2.0f, 3.0f}));
}

TEST(FrameTest, DenseEncodingWhenSmallerAndZerosNeverSent) {
  kernels::SparseVec v;
  for (uint32_t i = 0; i < 4; ++i) {
    v.idx.push_back(10 + i);
    v.val.push_back(i == 2 ? 0.0f : float(i + 1));
  }
  transport::Bytes b;
  const collectives::wire::BlockRange r{10, 14};
  collectives::wire::AppendBlockFrame(kMeta, r, kernels::View(v), &b);
  EXPECT_EQ(HeaderOf(b).flags, collectives::wire::kFrameDense);
  EXPECT_EQ(b.size(), collectives::wire::FrameBytes(4, 3));
  std::vector<kernels::SparseVec> out;
  const collectives::wire::ExpectedBlock e{r, 4};
  ASSERT_TRUE(collectives::wire::DecodeSparseBlocks(b, kMeta, {&e, 1}, &out).ok());
  EXPECT_EQ(out[0].idx, (std::vector<uint32_t>{10, 11, 13}));
}

TEST(FrameTest, ASparseFrameCarriesANegativeZeroAndNeverAPositiveOne) {
  // -0 is a sum that cancelled (kernels::MergeAddKeepCancelled): present.
  kernels::SparseVec v;
  v.idx = {100, 120, 150};
  v.val = {1.0f, 0.0f, -0.0f};
  transport::Bytes b;
  collectives::wire::AppendBlockFrame(kMeta, kRange, kernels::View(v), &b);
  EXPECT_EQ(HeaderOf(b).flags, collectives::wire::kFrameSparse);
  EXPECT_EQ(HeaderOf(b).count, 2u);
  std::vector<kernels::SparseVec> out;
  ASSERT_TRUE(collectives::wire::DecodeSparseBlocks(b, kMeta, {&kExpect, 1}, &out).ok());
  EXPECT_EQ(out[0].idx, (std::vector<uint32_t>{100, 150}));
  EXPECT_TRUE(std::signbit(out[0].val[1]));
}

TEST(FrameTest, BadMagic) {
  transport::Bytes b = GoodFrame();
  collectives::wire::FrameHeader h = HeaderOf(b);
  h.magic ^= 1;
  SetHeader(&b, h);
  ExpectRejected(b, collectives::wire::FrameError::kBadMagic);
}

TEST(FrameTest, WrongEpochJobStepPhaseAlgorithm) {
  struct Mut {
    void (*apply)(collectives::wire::FrameHeader&);
    collectives::wire::FrameError reason;
  };
  for (Mut m : {Mut{[](collectives::wire::FrameHeader& h) { h.epoch = 2; },
                    collectives::wire::FrameError::kWrongEpoch},
                Mut{[](collectives::wire::FrameHeader& h) { h.job_id = 8; },
                    collectives::wire::FrameError::kWrongJob},
                Mut{[](collectives::wire::FrameHeader& h) { h.step = 10; },
                    collectives::wire::FrameError::kWrongStep},
                Mut{[](collectives::wire::FrameHeader& h) { h.phase = 2; },
                    collectives::wire::FrameError::kWrongPhase},
                Mut{[](collectives::wire::FrameHeader& h) { h.version = 9; },
                    collectives::wire::FrameError::kBadVersion},
                Mut{[](collectives::wire::FrameHeader& h) { h.block_end = 300; },
                    collectives::wire::FrameError::kWrongBlock},
                Mut{[](collectives::wire::FrameHeader& h) { h.flags = 0; },
                    collectives::wire::FrameError::kBadFlags},
                Mut{[](collectives::wire::FrameHeader& h) { h.algorithm = 1; },
                    collectives::wire::FrameError::kWrongAlgorithm}}) {
    transport::Bytes b = GoodFrame();
    collectives::wire::FrameHeader h = HeaderOf(b);
    m.apply(h);
    SetHeader(&b, h);
    ExpectRejected(b, m.reason);
  }
}

TEST(FrameTest, IndexOutOfRange) {
  transport::Bytes b = GoodFrame();
  Indices(&b)[2] = 200;  // block is [100, 200)
  ExpectRejected(b, collectives::wire::FrameError::kIndexOutOfRange);
  b = GoodFrame();
  Indices(&b)[0] = 99;
  ExpectRejected(b, collectives::wire::FrameError::kIndexOutOfRange);
}

TEST(FrameTest, UnsortedOrDuplicateIndices) {
  transport::Bytes b = GoodFrame();
  Indices(&b)[1] = 100;  // duplicate of [0]
  ExpectRejected(b, collectives::wire::FrameError::kUnsortedIndices);
  b = GoodFrame();
  std::swap(Indices(&b)[0], Indices(&b)[1]);
  ExpectRejected(b, collectives::wire::FrameError::kUnsortedIndices);
}

TEST(FrameTest, CountAboveCapacity) {
  kernels::SparseVec v;
  for (uint32_t i = 0; i < 11; ++i) {
    v.idx.push_back(100 + i);
    v.val.push_back(1.0f);
  }
  transport::Bytes b;
  collectives::wire::AppendBlockFrame(kMeta, {100, 1000}, kernels::View(v), &b);
  const collectives::wire::ExpectedBlock e{{100, 1000}, 10};
  std::vector<kernels::SparseVec> out;
  auto before = collectives::wire::FrameErrorCounts()[static_cast<int>(
      collectives::wire::FrameError::kOverCapacity)];
  EXPECT_EQ(collectives::wire::DecodeSparseBlocks(b, kMeta, {&e, 1}, &out).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(collectives::wire::FrameErrorCounts()[static_cast<int>(
                collectives::wire::FrameError::kOverCapacity)],
            before + 1);
}

TEST(FrameTest, TruncatedAndTrailingBytes) {
  transport::Bytes b = GoodFrame();
  for (size_t cut : {size_t{0}, size_t{10}, sizeof(collectives::wire::FrameHeader), b.size() - 1}) {
    transport::Bytes t(b.begin(), b.begin() + cut);
    ExpectRejected(t, collectives::wire::FrameError::kTruncated);
  }
  b.push_back(0);
  ExpectRejected(b, collectives::wire::FrameError::kBadLength);
  // A count that would overflow the payload arithmetic is just over capacity.
  b = GoodFrame();
  collectives::wire::FrameHeader h = HeaderOf(b);
  h.count = 0xffffffffu;
  SetHeader(&b, h);
  ExpectRejected(b, collectives::wire::FrameError::kOverCapacity);
}

TEST(FrameTest, DenseFrameWrongLength) {
  std::vector<float> vals(100, 1.0f);
  transport::Bytes b;
  collectives::wire::AppendDenseFrame(kMeta, kRange, vals.data(), &b);
  std::vector<float> out(100, 0.0f);
  ASSERT_TRUE(collectives::wire::DecodeDenseBlock(b, kMeta, kRange, true, out.data()).ok());
  EXPECT_EQ(out[5], 1.0f);
  b.resize(b.size() - 4);
  auto s = collectives::wire::DecodeDenseBlock(b, kMeta, kRange, true, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(out[5], 1.0f);  // nothing added from a rejected frame
}

}  // namespace
}  // namespace gradex

namespace gradex {
namespace {

// Frames say who sent them, and the receiver checks it
// against the peer it received from; a replayed frame (another step) and a
// stale frame whose step shares the tag's low 24 bits are rejected too.
TEST(FrameSender, WrongPeerReplayAndStaleAfterTheTagWrapsAreRejected) {
  collectives::wire::FrameMeta meta{7, 3,           100, collectives::wire::CatalogId("spardl"),
                                    2, /*sender=*/2};
  kernels::SparseVec v;
  v.idx = {1, 5};
  v.val = {1.0f, 2.0f};
  transport::Bytes m;
  collectives::wire::AppendBlockFrame(meta, {0, 8}, kernels::View(v), &m);
  kernels::SparseVec w;
  w.idx = {9, 12};
  w.val = {3.0f, 4.0f};
  collectives::wire::AppendBlockFrame(meta, {8, 16}, kernels::View(w), &m);
  EXPECT_TRUE(collectives::wire::CheckFrameSenders(m, 2).ok());
  ASSERT_TRUE(collectives::wire::StampFrameSenders(&m, 5).ok());  // the next hop forwards it
  EXPECT_TRUE(collectives::wire::CheckFrameSenders(m, 5).ok());
  ASSERT_TRUE(collectives::wire::StampFrameSenders(&m, 2).ok());
  const uint64_t before = collectives::wire::TotalFrameErrors();
  absl::Status wrong = collectives::wire::CheckFrameSenders(m, 1);
  EXPECT_EQ(wrong.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(wrong.message().find("wrong_sender"), absl::string_view::npos) << wrong;
  EXPECT_EQ(collectives::wire::TotalFrameErrors(), before + 1);
  std::vector<collectives::wire::ExpectedBlock> want = {{{0, 8}, 8}, {{8, 16}, 8}};
  std::vector<kernels::SparseVec> out;
  ASSERT_TRUE(collectives::wire::DecodeSparseBlocks(m, meta, want, &out).ok());
  collectives::wire::FrameMeta replay = meta;
  replay.step = 101;  // the same frames delivered again at the next step
  EXPECT_NE(
      collectives::wire::DecodeSparseBlocks(m, replay, want, &out).message().find("wrong_step"),
      absl::string_view::npos);
  collectives::wire::FrameMeta wrapped = meta;
  wrapped.step = meta.step + (uint64_t{1} << 24);  // the tag's step bits wrapped
  EXPECT_EQ(collectives::MessageTag(2, wrapped.step, 0), collectives::MessageTag(2, meta.step, 0));
  EXPECT_NE(
      collectives::wire::DecodeSparseBlocks(m, wrapped, want, &out).message().find("wrong_step"),
      absl::string_view::npos);
}

}  // namespace
}  // namespace gradex
