// The one walker of the wire (collectives/wire/frame_walk.h): it finds every
// frame each encoder writes, end to end, and names what is not a frame.
#include "collectives/wire/frame_walk.h"

#include <cstddef>
#include <cstring>
#include <vector>

#include "collectives/wire/qsgd.h"
#include "gtest/gtest.h"

namespace gradex {
namespace {

const collectives::wire::FrameMeta kMeta{7, 3, 11, collectives::wire::CatalogId("spardl"), 1};

// A message of a sparse, a dense and a quantized frame.
transport::Bytes ThreeFrames(std::vector<size_t>* ends) {
  transport::Bytes m;
  kernels::SparseVec v;
  v.idx = {100, 150, 199};
  v.val = {1.5f, -2.0f, 3.0f};
  collectives::wire::AppendBlockFrame(kMeta, {100, 200}, kernels::View(v), &m);
  ends->push_back(m.size());
  std::vector<float> dense(40, 0.5f);
  collectives::wire::AppendDenseFrame(kMeta, {0, 40}, dense.data(), &m);
  ends->push_back(m.size());
  std::vector<float> decoded;
  collectives::wire::AppendQuantizedFrame(kMeta, {40, 80}, dense.data(), 4, /*seed=*/1, &m,
                                          &decoded);
  ends->push_back(m.size());
  return m;
}

TEST(FrameWalk, FindsEveryFrameTheEncodersWrite) {
  std::vector<size_t> ends;
  const transport::Bytes m = ThreeFrames(&ends);
  const std::vector<uint16_t> flags = {
      collectives::wire::kFrameSparse, collectives::wire::kFrameDense,
      collectives::wire::kFrameDense | collectives::wire::kFrameQuantized};
  size_t at = 0;
  for (size_t i = 0; i < ends.size(); ++i) {
    collectives::wire::FrameAt f;
    ASSERT_EQ(collectives::wire::ReadFrameAt(m, at, &f), collectives::wire::FrameShape::kOk)
        << "frame " << i;
    EXPECT_EQ(f.header.flags, flags[i]);
    EXPECT_TRUE(f.fits());
    EXPECT_EQ(f.end(), ends[i]);
    at = f.end();
  }
  EXPECT_EQ(at, m.size());
}

TEST(FrameWalk, NamesWhatIsNotAFrame) {
  std::vector<size_t> ends;
  const transport::Bytes good = ThreeFrames(&ends);
  collectives::wire::FrameAt f;
  EXPECT_EQ(collectives::wire::ReadFrameAt(good, good.size(), &f),
            collectives::wire::FrameShape::kTruncatedHeader);
  EXPECT_EQ(
      collectives::wire::ReadFrameAt(transport::Bytes(good.begin(), good.begin() + 10), 0, &f),
      collectives::wire::FrameShape::kTruncatedHeader);
  auto with = [&](size_t field, const void* value, size_t bytes, size_t frame = 0) {
    transport::Bytes b = good;
    std::memcpy(b.data() + (frame == 0 ? 0 : ends[frame - 1]) + field, value, bytes);
    return b;
  };
  const uint32_t magic = 1;
  EXPECT_EQ(collectives::wire::ReadFrameAt(
                with(offsetof(collectives::wire::FrameHeader, magic), &magic, 4), 0, &f),
            collectives::wire::FrameShape::kBadMagic);
  const uint16_t version = collectives::wire::kFrameVersion + 1;
  EXPECT_EQ(collectives::wire::ReadFrameAt(
                with(offsetof(collectives::wire::FrameHeader, version), &version, 2), 0, &f),
            collectives::wire::FrameShape::kBadVersion);
  for (uint16_t flags : {0, collectives::wire::kFrameDense | collectives::wire::kFrameSparse,
                         collectives::wire::kFrameSparse | collectives::wire::kFrameQuantized, 8}) {
    EXPECT_EQ(collectives::wire::ReadFrameAt(
                  with(offsetof(collectives::wire::FrameHeader, flags), &flags, 2), 0, &f),
              collectives::wire::FrameShape::kBadFlags)
        << flags;
  }
  const uint32_t bits = 3;
  EXPECT_EQ(collectives::wire::ReadFrameAt(
                with(sizeof(collectives::wire::FrameHeader), &bits, 4, 2), ends[1], &f),
            collectives::wire::FrameShape::kBadBits);
  EXPECT_EQ(collectives::wire::ReadFrameAt(
                transport::Bytes(good.begin(), good.begin() + ends[1] +
                                                   sizeof(collectives::wire::FrameHeader) + 2),
                ends[1], &f),
            collectives::wire::FrameShape::kNoBits);
  // A payload longer than the message: the shape is read, fits() says no.
  ASSERT_EQ(collectives::wire::ReadFrameAt(
                transport::Bytes(good.begin(), good.begin() + ends[0] - 1), 0, &f),
            collectives::wire::FrameShape::kOk);
  EXPECT_FALSE(f.fits());
  EXPECT_EQ(f.payload, 3u * 8);
}

}  // namespace
}  // namespace gradex
