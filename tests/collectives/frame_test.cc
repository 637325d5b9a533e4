// Bad frames are an error Status and a counter, never a crash or a wrong sum.
#include "collectives/wire/frame.h"

#include <cmath>
#include <cstring>

#include "collectives/link.h"
#include "gtest/gtest.h"

namespace gradex {
namespace {

const FrameMeta kMeta{7, 3, 11, CatalogId("spardl"), 1};
const BlockRange kRange{100, 200};
const ExpectedBlock kExpect{kRange, 10};

Bytes GoodFrame() {
  kernels::SparseVec v;
  v.idx = {100, 150, 199};
  v.val = {1.5f, -2.0f, 3.0f};
  Bytes b;
  AppendBlockFrame(kMeta, kRange, kernels::View(v), &b);
  return b;
}

FrameHeader HeaderOf(const Bytes& b) {
  FrameHeader h;
  std::memcpy(&h, b.data(), sizeof h);
  return h;
}
void SetHeader(Bytes* b, const FrameHeader& h) { std::memcpy(b->data(), &h, sizeof h); }
uint32_t* Indices(Bytes* b) { return reinterpret_cast<uint32_t*>(b->data() + sizeof(FrameHeader)); }

// Decodes `b` and expects a DataLoss naming `reason`, with its counter bumped.
void ExpectRejected(const Bytes& b, FrameError reason) {
  auto before = FrameErrorCounts()[static_cast<int>(reason)];
  std::vector<kernels::SparseVec> out;
  absl::Status s = DecodeSparseBlocks(b, kMeta, {&kExpect, 1}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(std::string(s.message()).find(FrameErrorName(reason)), std::string::npos) << s;
  EXPECT_EQ(FrameErrorCounts()[static_cast<int>(reason)], before + 1);
}

TEST(FrameTest, RoundTripSparse) {
  std::vector<kernels::SparseVec> out;
  ASSERT_TRUE(DecodeSparseBlocks(GoodFrame(), kMeta, {&kExpect, 1}, &out).ok());
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
  Bytes b;
  const BlockRange r{10, 14};
  AppendBlockFrame(kMeta, r, kernels::View(v), &b);
  EXPECT_EQ(HeaderOf(b).flags, kFrameDense);
  EXPECT_EQ(b.size(), FrameBytes(4, 3));
  std::vector<kernels::SparseVec> out;
  const ExpectedBlock e{r, 4};
  ASSERT_TRUE(DecodeSparseBlocks(b, kMeta, {&e, 1}, &out).ok());
  EXPECT_EQ(out[0].idx, (std::vector<uint32_t>{10, 11, 13}));
}

TEST(FrameTest, ASparseFrameCarriesANegativeZeroAndNeverAPositiveOne) {
  // -0 is a sum that cancelled (kernels::MergeAddKeepCancelled): present.
  kernels::SparseVec v;
  v.idx = {100, 120, 150};
  v.val = {1.0f, 0.0f, -0.0f};
  Bytes b;
  AppendBlockFrame(kMeta, kRange, kernels::View(v), &b);
  EXPECT_EQ(HeaderOf(b).flags, kFrameSparse);
  EXPECT_EQ(HeaderOf(b).count, 2u);
  std::vector<kernels::SparseVec> out;
  ASSERT_TRUE(DecodeSparseBlocks(b, kMeta, {&kExpect, 1}, &out).ok());
  EXPECT_EQ(out[0].idx, (std::vector<uint32_t>{100, 150}));
  EXPECT_TRUE(std::signbit(out[0].val[1]));
}

TEST(FrameTest, BadMagic) {
  Bytes b = GoodFrame();
  FrameHeader h = HeaderOf(b);
  h.magic ^= 1;
  SetHeader(&b, h);
  ExpectRejected(b, FrameError::kBadMagic);
}

TEST(FrameTest, WrongEpochJobStepPhaseAlgorithm) {
  struct Mut {
    void (*apply)(FrameHeader&);
    FrameError reason;
  };
  for (Mut m : {Mut{[](FrameHeader& h) { h.epoch = 2; }, FrameError::kWrongEpoch},
                Mut{[](FrameHeader& h) { h.job_id = 8; }, FrameError::kWrongJob},
                Mut{[](FrameHeader& h) { h.step = 10; }, FrameError::kWrongStep},
                Mut{[](FrameHeader& h) { h.phase = 2; }, FrameError::kWrongPhase},
                Mut{[](FrameHeader& h) { h.version = 9; }, FrameError::kBadVersion},
                Mut{[](FrameHeader& h) { h.block_end = 300; }, FrameError::kWrongBlock},
                Mut{[](FrameHeader& h) { h.flags = 0; }, FrameError::kBadFlags},
                Mut{[](FrameHeader& h) { h.algorithm = 1; }, FrameError::kWrongAlgorithm}}) {
    Bytes b = GoodFrame();
    FrameHeader h = HeaderOf(b);
    m.apply(h);
    SetHeader(&b, h);
    ExpectRejected(b, m.reason);
  }
}

TEST(FrameTest, IndexOutOfRange) {
  Bytes b = GoodFrame();
  Indices(&b)[2] = 200;  // block is [100, 200)
  ExpectRejected(b, FrameError::kIndexOutOfRange);
  b = GoodFrame();
  Indices(&b)[0] = 99;
  ExpectRejected(b, FrameError::kIndexOutOfRange);
}

TEST(FrameTest, UnsortedOrDuplicateIndices) {
  Bytes b = GoodFrame();
  Indices(&b)[1] = 100;  // duplicate of [0]
  ExpectRejected(b, FrameError::kUnsortedIndices);
  b = GoodFrame();
  std::swap(Indices(&b)[0], Indices(&b)[1]);
  ExpectRejected(b, FrameError::kUnsortedIndices);
}

TEST(FrameTest, CountAboveCapacity) {
  kernels::SparseVec v;
  for (uint32_t i = 0; i < 11; ++i) {
    v.idx.push_back(100 + i);
    v.val.push_back(1.0f);
  }
  Bytes b;
  AppendBlockFrame(kMeta, {100, 1000}, kernels::View(v), &b);
  const ExpectedBlock e{{100, 1000}, 10};
  std::vector<kernels::SparseVec> out;
  auto before = FrameErrorCounts()[static_cast<int>(FrameError::kOverCapacity)];
  EXPECT_EQ(DecodeSparseBlocks(b, kMeta, {&e, 1}, &out).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(FrameErrorCounts()[static_cast<int>(FrameError::kOverCapacity)], before + 1);
}

TEST(FrameTest, TruncatedAndTrailingBytes) {
  Bytes b = GoodFrame();
  for (size_t cut : {size_t{0}, size_t{10}, sizeof(FrameHeader), b.size() - 1}) {
    Bytes t(b.begin(), b.begin() + cut);
    ExpectRejected(t, FrameError::kTruncated);
  }
  b.push_back(0);
  ExpectRejected(b, FrameError::kBadLength);
  // A count that would overflow the payload arithmetic is just over capacity.
  b = GoodFrame();
  FrameHeader h = HeaderOf(b);
  h.count = 0xffffffffu;
  SetHeader(&b, h);
  ExpectRejected(b, FrameError::kOverCapacity);
}

TEST(FrameTest, DenseFrameWrongLength) {
  std::vector<float> vals(100, 1.0f);
  Bytes b;
  AppendDenseFrame(kMeta, kRange, vals.data(), &b);
  std::vector<float> out(100, 0.0f);
  ASSERT_TRUE(DecodeDenseBlock(b, kMeta, kRange, true, out.data()).ok());
  EXPECT_EQ(out[5], 1.0f);
  b.resize(b.size() - 4);
  auto s = DecodeDenseBlock(b, kMeta, kRange, true, out.data());
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
  FrameMeta meta{7, 3, 100, CatalogId("spardl"), 2, /*sender=*/2};
  kernels::SparseVec v;
  v.idx = {1, 5};
  v.val = {1.0f, 2.0f};
  Bytes m;
  AppendBlockFrame(meta, {0, 8}, kernels::View(v), &m);
  kernels::SparseVec w;
  w.idx = {9, 12};
  w.val = {3.0f, 4.0f};
  AppendBlockFrame(meta, {8, 16}, kernels::View(w), &m);
  EXPECT_TRUE(CheckFrameSenders(m, 2).ok());
  ASSERT_TRUE(StampFrameSenders(&m, 5).ok());  // the next hop forwards it
  EXPECT_TRUE(CheckFrameSenders(m, 5).ok());
  ASSERT_TRUE(StampFrameSenders(&m, 2).ok());
  const uint64_t before = TotalFrameErrors();
  absl::Status wrong = CheckFrameSenders(m, 1);
  EXPECT_EQ(wrong.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(wrong.message().find("wrong_sender"), absl::string_view::npos) << wrong;
  EXPECT_EQ(TotalFrameErrors(), before + 1);
  std::vector<ExpectedBlock> want = {{{0, 8}, 8}, {{8, 16}, 8}};
  std::vector<kernels::SparseVec> out;
  ASSERT_TRUE(DecodeSparseBlocks(m, meta, want, &out).ok());
  FrameMeta replay = meta;
  replay.step = 101;  // the same frames delivered again at the next step
  EXPECT_NE(DecodeSparseBlocks(m, replay, want, &out).message().find("wrong_step"),
            absl::string_view::npos);
  FrameMeta wrapped = meta;
  wrapped.step = meta.step + (uint64_t{1} << 24);  // the tag's step bits wrapped
  EXPECT_EQ(MessageTag(2, wrapped.step, 0), MessageTag(2, meta.step, 0));
  EXPECT_NE(DecodeSparseBlocks(m, wrapped, want, &out).message().find("wrong_step"),
            absl::string_view::npos);
}

}  // namespace
}  // namespace gradex
