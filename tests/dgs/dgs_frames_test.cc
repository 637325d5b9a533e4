// DGS frames and snapshots: every field a worker sends is bounded before
// use, and a refusal names it; refused pushes are counted and never
// applied; a snapshot round-trips and every corruption of it is refused.
#include <cmath>
#include <cstring>

#include "tests/dgs/dgs_frames_fixture.h"

namespace gradex::dgs_test {
namespace {

TEST_F(DgsFrames, AValidPushDecodesToItsEntries) {
  ps::DgsMessage m;
  ps::DgsRefusal why;
  ASSERT_TRUE(ps::DecodeDgsFromWorker(Push(), ctx_, 1, &m, &why).ok());
  EXPECT_EQ(m.kind, ps::DgsKind::kPush);
  EXPECT_EQ(m.request, 5u);
  EXPECT_EQ(m.ratio, 0.5f);
  EXPECT_EQ(m.sparse.idx, (std::vector<uint32_t>{1, 7, 9}));
  EXPECT_EQ(m.sparse.val, (std::vector<float>{2, -3, 1}));
  // Pieces: the shard's range cut at layer 0's end.
  EXPECT_EQ(layout_.Pieces({0, 11}), (std::vector<ps::DgsRange>{{0, 6}, {6, 11}}));
  EXPECT_EQ(layout_.Pieces({11, 21}), (std::vector<ps::DgsRange>{{11, 16}, {16, 21}}));
  EXPECT_LE(Push().size(), ps::DgsMaxMessageBytes(layout_, {0, 11}));
}

TEST_F(DgsFrames, EveryBadFieldIsRefusedAndNamed) {
  struct Case {
    const char* what;
    std::function<void(transport::Bytes&)> mutate;
    ps::DgsRefusal want;
    uint32_t from = 1;
  };
  const std::vector<Case> cases = {
      {"another worker's id", [](transport::Bytes& b) { Put<uint32_t>(b, 20, 2); },
       ps::DgsRefusal::kWrongWorker},
      {"a worker id out of range", [](transport::Bytes& b) { Put<uint32_t>(b, 20, 99); },
       ps::DgsRefusal::kWrongWorker},
      {"from the rank of another worker", [](transport::Bytes&) {}, ps::DgsRefusal::kWrongWorker,
       2},
      {"magic", [](transport::Bytes& b) { b[0] ^= 1; }, ps::DgsRefusal::kBadMagic},
      {"format", [](transport::Bytes& b) { Put<uint16_t>(b, 4, 9); }, ps::DgsRefusal::kBadMagic},
      {"unapplied (a full sync's field) on a push",
       [](transport::Bytes& b) { Put<uint32_t>(b, 60, 1); }, ps::DgsRefusal::kBadMagic},
      {"kind", [](transport::Bytes& b) { Put<uint16_t>(b, 6, 3); }, ps::DgsRefusal::kWrongKind},
      {"job", [](transport::Bytes& b) { Put<uint64_t>(b, 8, 8); }, ps::DgsRefusal::kWrongJob},
      {"epoch", [](transport::Bytes& b) { Put<uint32_t>(b, 16, 4); }, ps::DgsRefusal::kWrongJob},
      {"shard", [](transport::Bytes& b) { Put<uint32_t>(b, 24, 1); }, ps::DgsRefusal::kWrongShard},
      {"piece count", [](transport::Bytes& b) { Put<uint32_t>(b, 28, 3); },
       ps::DgsRefusal::kWrongPieces},
      {"layout", [](transport::Bytes& b) { b[32] ^= 0x40; }, ps::DgsRefusal::kWrongLayout},
      {"ratio 0", [](transport::Bytes& b) { Put<float>(b, 48, 0.0f); }, ps::DgsRefusal::kBadRatio},
      {"ratio 1.5", [](transport::Bytes& b) { Put<float>(b, 48, 1.5f); },
       ps::DgsRefusal::kBadRatio},
      {"ratio NaN", [](transport::Bytes& b) { Put<float>(b, 48, NAN); }, ps::DgsRefusal::kBadRatio},
      {"a reason on a push", [](transport::Bytes& b) { Put<uint32_t>(b, 52, 3); },
       ps::DgsRefusal::kWrongKind},
      {"frame magic", [](transport::Bytes& b) { b[kFrame0] ^= 1; }, ps::DgsRefusal::kBadMagic},
      {"frame job", [](transport::Bytes& b) { Put<uint64_t>(b, kFrame0 + 8, 1); },
       ps::DgsRefusal::kWrongJob},
      {"frame step (version)", [](transport::Bytes& b) { Put<uint64_t>(b, kFrame0 + 24, 1); },
       ps::DgsRefusal::kWrongPieces},
      {"frame block", [](transport::Bytes& b) { Put<uint32_t>(b, kFrame0 + 36, 5); },
       ps::DgsRefusal::kWrongPieces},
      {"frame sender", [](transport::Bytes& b) { Put<uint32_t>(b, kFrame0 + 44, 0); },
       ps::DgsRefusal::kWrongPieces},
      {"frame quantized",
       [](transport::Bytes& b) {
         Put<uint16_t>(b, kFrame0 + 6,
                       collectives::wire::kFrameDense | collectives::wire::kFrameQuantized);
       },
       ps::DgsRefusal::kBadFlags},
      {"count above the piece", [](transport::Bytes& b) { Put<uint32_t>(b, kFrame0 + 40, 7); },
       ps::DgsRefusal::kOverCapacity},
      {"count beyond the bytes",  // the last frame's
       [](transport::Bytes& b) { Put<uint32_t>(b, kPayload0 + 8 + 40, 5); },
       ps::DgsRefusal::kTruncated},
      {"index out of its piece", [](transport::Bytes& b) { Put<uint32_t>(b, kPayload0, 6); },
       ps::DgsRefusal::kIndexOutOfRange},
      {"index out of the model",
       [](transport::Bytes& b) { Put<uint32_t>(b, kPayload0, 0xffffffffu); },
       ps::DgsRefusal::kIndexOutOfRange},
      {"NaN value", [](transport::Bytes& b) { Put<float>(b, kPayload0 + 4, NAN); },
       ps::DgsRefusal::kNonFinite},
      {"Inf value", [](transport::Bytes& b) { Put<float>(b, kPayload0 + 4, INFINITY); },
       ps::DgsRefusal::kNonFinite},
      {"a trailing byte", [](transport::Bytes& b) { b.push_back(0); }, ps::DgsRefusal::kBadLength},
  };
  for (const Case& c : cases) {
    transport::Bytes b = Push();
    c.mutate(b);
    EXPECT_EQ(Decode(b, c.from), c.want) << c.what;
  }
  // The second piece's two indices swapped: not increasing.
  transport::Bytes b = Push();
  const size_t frame1 = kPayload0 + 8;  // after piece 0's one entry
  const size_t idx1 = frame1 + sizeof(collectives::wire::FrameHeader);
  uint32_t i0, i1;
  std::memcpy(&i0, b.data() + idx1, 4);
  std::memcpy(&i1, b.data() + idx1 + 4, 4);
  ASSERT_EQ(i0, 7u);
  Put(b, idx1, i1);
  Put(b, idx1 + 4, i0);
  EXPECT_EQ(Decode(b), ps::DgsRefusal::kUnsortedIndices);
  Put(b, idx1, i0);
  EXPECT_EQ(Decode(b), ps::DgsRefusal::kUnsortedIndices);  // a duplicate
  // Every truncation.
  const transport::Bytes full = Push();
  for (size_t n = 0; n < full.size(); ++n) {
    transport::Bytes cut(full.begin(), full.begin() + n);
    EXPECT_NE(Decode(cut), ps::DgsRefusal::kNone) << n << " bytes";
  }
  // The shard's replies are refused on the worker side when they are for
  // another worker, or are a worker's kind.
  ps::DgsMessage m;
  ps::DgsRefusal why;
  EXPECT_FALSE(ps::DecodeDgsFromShard(full, ctx_, 1, &m, &why).ok());
  EXPECT_EQ(why, ps::DgsRefusal::kWrongKind);
  const transport::Bytes refused = ps::EncodeDgsRefused(ctx_, 2, 9, 0, ps::DgsRefusal::kNotJoined);
  EXPECT_FALSE(ps::DecodeDgsFromShard(refused, ctx_, 1, &m, &why).ok());
  EXPECT_EQ(why, ps::DgsRefusal::kWrongWorker);
  ASSERT_TRUE(ps::DecodeDgsFromShard(refused, ctx_, 2, &m, &why).ok());
  EXPECT_EQ(m.reason, ps::DgsRefusal::kNotJoined);
  EXPECT_EQ(m.request, 9u);
}

// Pushes that decode but do not fit the shard's state: refused, counted by
// reason, and the model and version stay as they were.
TEST_F(DgsFrames, StatefulRefusalsAreCountedAndNeverApplied) {
  std::mt19937 rng(1);
  std::vector<float> init = IntGrad(11, rng);
  auto decode = [&](const transport::Bytes& b) {
    ps::DgsMessage m;
    ps::DgsRefusal why;
    EXPECT_TRUE(ps::DecodeDgsFromWorker(b, ctx_, 1, &m, &why).ok());
    return m;
  };
  ps::DgsRefusal why;
  ps::DgsMessage reply;
  // A hello without values to a shard without a model.
  EXPECT_FALSE(shard_.Join(1, {}, &reply, &why).ok());
  EXPECT_EQ(why, ps::DgsRefusal::kNoModel);
  // Not joined yet.
  EXPECT_FALSE(shard_.ApplyPush(1, decode(Push()), &why).ok());
  EXPECT_EQ(why, ps::DgsRefusal::kNotJoined);
  ASSERT_TRUE(shard_.Join(0, init, &reply).ok());
  ASSERT_TRUE(shard_.Join(1, {}, &reply).ok());
  ASSERT_TRUE(shard_.ApplyPush(1, decode(Push(0))).ok());  // version 1
  ASSERT_TRUE(shard_.MakePull(1, &reply).ok());            // worker 1 at 1
  const std::vector<float> m(shard_.model().begin(), shard_.model().end());
  EXPECT_EQ(m[1], init[1] + 2);
  struct Case {
    uint64_t base;
    uint32_t as;
    ps::DgsRefusal want;
  };
  for (const Case& c :
       {Case{2, 1, ps::DgsRefusal::kVersionAhead}, Case{0, 1, ps::DgsRefusal::kStaleVersion},
        Case{1, 0, ps::DgsRefusal::kWrongWorker}}) {
    EXPECT_FALSE(shard_.ApplyPush(c.as, decode(Push(c.base)), &why).ok());
    EXPECT_EQ(why, c.want);
  }
  EXPECT_EQ(shard_.version(), 1u);
  EXPECT_TRUE(std::equal(m.begin(), m.end(), shard_.model().begin()));
  const ps::DgsRefusalCounts& r = shard_.refused();
  EXPECT_EQ(r[static_cast<size_t>(ps::DgsRefusal::kNoModel)], 1u);
  EXPECT_EQ(r[static_cast<size_t>(ps::DgsRefusal::kNotJoined)], 1u);
  EXPECT_EQ(r[static_cast<size_t>(ps::DgsRefusal::kVersionAhead)], 1u);
  EXPECT_EQ(r[static_cast<size_t>(ps::DgsRefusal::kStaleVersion)], 1u);
  EXPECT_EQ(r[static_cast<size_t>(ps::DgsRefusal::kWrongWorker)], 1u);
  EXPECT_EQ(shard_.total_refused(), 5u);
  // An evicted worker must say hello again.
  shard_.Deactivate(1);
  EXPECT_FALSE(shard_.ApplyPush(1, decode(Push(1)), &why).ok());
  EXPECT_EQ(why, ps::DgsRefusal::kNotJoined);
}

TEST_F(DgsFrames, SnapshotRoundTripsAndEveryCorruptionIsRefused) {
  std::mt19937 rng(2);
  ps::DgsMessage reply;
  ASSERT_TRUE(shard_.Join(0, IntGrad(11, rng), &reply).ok());
  kernels::SparseVec e;
  e.idx = {0, 4, 10};
  e.val = {1.5f, -2, 8};
  for (uint64_t v = 0; v < 3; ++v) {
    absl::StatusOr<transport::Bytes> b = ps::EncodeDgsPush(ctx_, 0, 1, v, 1.0f, kernels::View(e));
    ps::DgsMessage m;
    ps::DgsRefusal why;
    ASSERT_TRUE(ps::DecodeDgsFromWorker(*b, ctx_, 0, &m, &why).ok());
    ASSERT_TRUE(shard_.ApplyPush(0, m).ok());
    ASSERT_TRUE(shard_.MakePull(0, &reply).ok());
  }
  const transport::Bytes snap = *shard_.Snapshot();
  auto restored = ps::DgsServerShard::Create(layout_, 0, {0, 11}, {.workers = 3});
  ASSERT_TRUE(restored.ok());
  const transport::Bytes empty = *restored->Snapshot();  // a shard without a model
  // Every single-byte change, every truncation and an extra byte: refused,
  // and the shard unchanged.
  for (size_t i = 0; i < snap.size(); ++i) {
    for (uint8_t flip : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
      transport::Bytes bad = snap;
      bad[i] ^= flip;
      absl::Status s = restored->Restore(bad);
      ASSERT_EQ(s.code(), absl::StatusCode::kDataLoss) << "byte " << i;
    }
  }
  for (size_t n = 0; n < snap.size(); ++n) {
    ASSERT_FALSE(restored->Restore(std::span<const uint8_t>(snap).first(n)).ok()) << n;
  }
  transport::Bytes longer = snap;
  longer.push_back(0);
  EXPECT_FALSE(restored->Restore(longer).ok());
  EXPECT_FALSE(restored->has_model());
  EXPECT_EQ(restored->version(), 0u);
  // Another shard, range or layout refuses it.
  auto other_range = ps::DgsServerShard::Create(layout_, 0, {0, 10}, {.workers = 3});
  EXPECT_FALSE(other_range->Restore(snap).ok());
  auto other_shard = ps::DgsServerShard::Create(layout_, 1, {0, 11}, {.workers = 3});
  EXPECT_NE(std::string(other_shard->Restore(snap).message()).find("shard"), std::string::npos);
  const ps::DgsLayout other_layout = MakeLayout({5, 11, 5});
  auto other_model = ps::DgsServerShard::Create(other_layout, 0, {0, 11}, {.workers = 3});
  EXPECT_NE(std::string(other_model->Restore(snap).message()).find("fingerprint"),
            std::string::npos);
  // The round trip: M and the version; every worker must rejoin.
  ASSERT_TRUE(restored->Restore(snap).ok());
  EXPECT_TRUE(restored->has_model());
  EXPECT_EQ(restored->version(), 3u);
  EXPECT_TRUE(std::equal(shard_.model().begin(), shard_.model().end(), restored->model().begin()));
  EXPECT_FALSE(restored->active(0));
  ASSERT_TRUE(restored->Join(0, {}, &reply).ok());
  EXPECT_EQ(reply.kind, ps::DgsKind::kFullSync);
  EXPECT_EQ(reply.version, 3u);
  EXPECT_TRUE(std::equal(reply.dense.begin(), reply.dense.end(), shard_.model().begin()));
  // A snapshot of a shard without a model restores to none.
  ASSERT_TRUE(restored->Restore(empty).ok());
  EXPECT_FALSE(restored->has_model());
}

TEST(DgsLayoutTest, BadLayoutsAndSplitsAreRefused) {
  EXPECT_FALSE(ps::DgsLayout::Create({}).ok());
  EXPECT_FALSE(ps::DgsLayout::Create({3, 0, 2}).ok());
  EXPECT_FALSE(ps::DgsLayout::Create({0xffffffffu, 1}).ok());
  const ps::DgsLayout l = MakeLayout({3, 4});
  EXPECT_NE(l.fingerprint(), MakeLayout({4, 3}).fingerprint());
  EXPECT_FALSE(l.SplitShards(0).ok());
  EXPECT_FALSE(l.SplitShards(8).ok());
  auto s = l.SplitShards(3);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, (std::vector<ps::DgsRange>{{0, 3}, {3, 5}, {5, 7}}));
  EXPECT_FALSE(ps::DgsServerShard::Create(l, 0, {5, 8}, {}).ok());
  EXPECT_FALSE(ps::DgsServerShard::Create(l, 0, {0, 7}, {.workers = 0}).ok());
  EXPECT_FALSE(ps::DgsServerShard::Create(l, 0, {0, 7}, {.full_sync_every = 0}).ok());
}

}  // namespace
}  // namespace gradex::dgs_test
