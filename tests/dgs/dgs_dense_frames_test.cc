// DGS's dense route (R = 1, ASGD): the kDensePush / kDensePull frames are
// bounded and refused field by field like the sparse ones, and the shard's
// dense apply adds only nonzeros and checks what it is handed.
#include <cmath>
#include <cstring>

#include "tests/dgs/dgs_frames_fixture.h"

namespace gradex::dgs_test {
namespace {

// The dense route (R = 1): a kDensePush / kDensePull is one dense frame per
// piece, values only, bounded by the range the receiver knows; every field
// corrupted in turn is refused with its named reason, every truncation too.
TEST_F(DgsFrames, EveryBadFieldOfADenseMessageIsRefusedAndNamed) {
  std::vector<float> change(11, 0);
  change[1] = 2;
  change[7] = -3;
  absl::StatusOr<transport::Bytes> good = ps::EncodeDgsDensePush(ctx_, 1, 5, 0, change);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(good->size(), ps::DgsMaxMessageBytes(layout_, {0, 11}));
  ps::DgsMessage m;
  ps::DgsRefusal why;
  ASSERT_TRUE(ps::DecodeDgsFromWorker(*good, ctx_, 1, &m, &why).ok());
  EXPECT_EQ(m.kind, ps::DgsKind::kDensePush);
  EXPECT_EQ(m.ratio, 1.0f);
  EXPECT_EQ(m.dense, change);
  EXPECT_TRUE(m.sparse.idx.empty());
  const size_t frame1 = kPayload0 + 6 * 4;  // after piece 0's 6 values
  const std::vector<std::pair<const char*, std::function<void(transport::Bytes&)>>> bad = {
      {"ratio 0.5", [](transport::Bytes& b) { Put<float>(b, 48, 0.5f); }},
      {"ratio 0", [](transport::Bytes& b) { Put<float>(b, 48, 0.0f); }},
      {"a pull's kind from a worker", [](transport::Bytes& b) { Put<uint16_t>(b, 6, 8); }},
      {"piece count", [](transport::Bytes& b) { Put<uint32_t>(b, 28, 1); }},
      {"frame sparse",
       [](transport::Bytes& b) { Put<uint16_t>(b, kFrame0 + 6, collectives::wire::kFrameSparse); }},
      {"frame phase", [](transport::Bytes& b) { Put<uint16_t>(b, kFrame0 + 22, 2); }},
      {"count below the piece", [](transport::Bytes& b) { Put<uint32_t>(b, kFrame0 + 40, 5); }},
      {"count above the piece", [&](transport::Bytes& b) { Put<uint32_t>(b, frame1 + 40, 6); }},
      {"second frame block", [&](transport::Bytes& b) { Put<uint32_t>(b, frame1 + 36, 7); }},
      {"NaN value",
       [&](transport::Bytes& b) {
         Put<float>(b, frame1 + sizeof(collectives::wire::FrameHeader) + 8, NAN);
       }},
      {"a trailing byte", [](transport::Bytes& b) { b.push_back(0); }},
  };
  const std::vector<ps::DgsRefusal> want = {
      ps::DgsRefusal::kBadRatio,     ps::DgsRefusal::kBadRatio,     ps::DgsRefusal::kWrongKind,
      ps::DgsRefusal::kWrongPieces,  ps::DgsRefusal::kBadFlags,     ps::DgsRefusal::kWrongPieces,
      ps::DgsRefusal::kOverCapacity, ps::DgsRefusal::kOverCapacity, ps::DgsRefusal::kWrongPieces,
      ps::DgsRefusal::kNonFinite,    ps::DgsRefusal::kBadLength};
  for (size_t c = 0; c < bad.size(); ++c) {
    transport::Bytes b = *good;
    bad[c].second(b);
    EXPECT_EQ(Decode(b), want[c]) << bad[c].first;
  }
  for (size_t n = 0; n < good->size(); ++n) {
    EXPECT_NE(Decode(transport::Bytes(good->begin(), good->begin() + n)), ps::DgsRefusal::kNone)
        << n;
  }
  // A dense pull: taken by the worker, refused from it as a push; a ratio
  // on a pull is refused.
  ps::DgsMessage pull;
  pull.kind = ps::DgsKind::kDensePull;
  pull.worker = 1;
  pull.version = 4;
  pull.request = 5;
  pull.dense = change;
  absl::StatusOr<transport::Bytes> p = ps::EncodeDgsReply(ctx_, pull);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(ps::DecodeDgsFromShard(*p, ctx_, 1, &m, &why).ok());
  EXPECT_EQ(m.kind, ps::DgsKind::kDensePull);
  EXPECT_EQ(m.dense, change);
  EXPECT_EQ(Decode(*p), ps::DgsRefusal::kWrongKind);
  transport::Bytes q = *p;
  Put<float>(q, 48, 1.0f);
  EXPECT_FALSE(ps::DecodeDgsFromShard(q, ctx_, 1, &m, &why).ok());
  EXPECT_EQ(why, ps::DgsRefusal::kBadRatio);
  EXPECT_FALSE(ps::DecodeDgsFromShard(*good, ctx_, 1, &m, &why).ok());
  EXPECT_EQ(why, ps::DgsRefusal::kWrongKind);
  transport::Bytes u = *p;  // the unapplied number belongs to a full sync only
  Put<uint32_t>(u, 60, 9);
  EXPECT_FALSE(ps::DecodeDgsFromShard(u, ctx_, 1, &m, &why).ok());
  EXPECT_EQ(why, ps::DgsRefusal::kBadMagic);
  pull.kind = ps::DgsKind::kFullSync;
  pull.unapplied = 9;
  p = ps::EncodeDgsReply(ctx_, pull);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(ps::DecodeDgsFromShard(*p, ctx_, 1, &m, &why).ok());
  EXPECT_EQ(m.unapplied, 9u);
}

// A dense push adds only its nonzeros (a zero is no entry): a −0 in M stays
// −0, as on the sparse route; a dense push of the wrong size, ratio or with
// a non-finite value handed to the shard directly is refused, not applied.
TEST_F(DgsFrames, ADensePushAddsOnlyNonzerosAndIsCheckedByTheShard) {
  std::vector<float> init(11, 1.0f);
  init[3] = -0.0f;
  ps::DgsMessage reply;
  ASSERT_TRUE(shard_.Join(1, init, &reply).ok());
  ps::DgsMessage push;
  push.kind = ps::DgsKind::kDensePush;
  push.worker = 1;
  push.ratio = 1;
  push.dense.assign(11, 0.0f);  // +0 everywhere, 2 at 5
  push.dense[5] = 2;
  ASSERT_TRUE(shard_.ApplyPush(1, push).ok());
  EXPECT_TRUE(std::signbit(shard_.model()[3]));
  EXPECT_EQ(shard_.model()[5], 3.0f);
  EXPECT_EQ(shard_.stats().pushed_entries, 1u);
  ASSERT_TRUE(shard_.MakePull(1, &reply).ok());
  EXPECT_EQ(reply.kind, ps::DgsKind::kDensePull);
  EXPECT_EQ(reply.dense[5], 2.0f);
  EXPECT_EQ(shard_.stats().pulled_entries, 1u);
  const std::vector<float> m(shard_.model().begin(), shard_.model().end());
  ps::DgsRefusal why;
  push.version = 1;
  ps::DgsMessage bad = push;
  bad.dense.pop_back();
  EXPECT_FALSE(shard_.ApplyPush(1, bad, &why).ok());
  EXPECT_EQ(why, ps::DgsRefusal::kBadLength);
  bad = push;
  bad.ratio = 0.5f;
  EXPECT_FALSE(shard_.ApplyPush(1, bad, &why).ok());
  EXPECT_EQ(why, ps::DgsRefusal::kBadRatio);
  bad = push;
  bad.dense[10] = INFINITY;
  EXPECT_FALSE(shard_.ApplyPush(1, bad, &why).ok());
  EXPECT_EQ(why, ps::DgsRefusal::kNonFinite);
  EXPECT_EQ(shard_.version(), 1u);
  EXPECT_TRUE(std::equal(m.begin(), m.end(), shard_.model().begin()));
}

}  // namespace
}  // namespace gradex::dgs_test
