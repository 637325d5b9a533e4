// The one walker of the wire (collectives/wire/frame_walk.h): it finds every
// frame each encoder writes, end to end, and names what is not a frame.
#include "collectives/wire/frame_walk.h"

#include <cstddef>
#include <cstring>
#include <vector>

#include "collectives/algorithms/qsgd.h"
#include "gtest/gtest.h"

namespace gradex {
namespace {

const FrameMeta kMeta{7, 3, 11, CatalogId("spardl"), 1};

// A message of a sparse, a dense and a quantized frame.
Bytes ThreeFrames(std::vector<size_t>* ends) {
  Bytes m;
  kernels::SparseVec v;
  v.idx = {100, 150, 199};
  v.val = {1.5f, -2.0f, 3.0f};
  AppendBlockFrame(kMeta, {100, 200}, kernels::View(v), &m);
  ends->push_back(m.size());
  std::vector<float> dense(40, 0.5f);
  AppendDenseFrame(kMeta, {0, 40}, dense.data(), &m);
  ends->push_back(m.size());
  std::vector<float> decoded;
  AppendQuantizedFrame(kMeta, {40, 80}, dense.data(), 4, /*seed=*/1, &m, &decoded);
  ends->push_back(m.size());
  return m;
}

TEST(FrameWalk, FindsEveryFrameTheEncodersWrite) {
  std::vector<size_t> ends;
  const Bytes m = ThreeFrames(&ends);
  const std::vector<uint16_t> flags = {kFrameSparse, kFrameDense, kFrameDense | kFrameQuantized};
  size_t at = 0;
  for (size_t i = 0; i < ends.size(); ++i) {
    FrameAt f;
    ASSERT_EQ(ReadFrameAt(m, at, &f), FrameShape::kOk) << "frame " << i;
    EXPECT_EQ(f.header.flags, flags[i]);
    EXPECT_TRUE(f.fits());
    EXPECT_EQ(f.end(), ends[i]);
    at = f.end();
  }
  EXPECT_EQ(at, m.size());
}

TEST(FrameWalk, NamesWhatIsNotAFrame) {
  std::vector<size_t> ends;
  const Bytes good = ThreeFrames(&ends);
  FrameAt f;
  EXPECT_EQ(ReadFrameAt(good, good.size(), &f), FrameShape::kTruncatedHeader);
  EXPECT_EQ(ReadFrameAt(Bytes(good.begin(), good.begin() + 10), 0, &f),
            FrameShape::kTruncatedHeader);
  auto with = [&](size_t field, const void* value, size_t bytes, size_t frame = 0) {
    Bytes b = good;
    std::memcpy(b.data() + (frame == 0 ? 0 : ends[frame - 1]) + field, value, bytes);
    return b;
  };
  const uint32_t magic = 1;
  EXPECT_EQ(ReadFrameAt(with(offsetof(FrameHeader, magic), &magic, 4), 0, &f),
            FrameShape::kBadMagic);
  const uint16_t version = kFrameVersion + 1;
  EXPECT_EQ(ReadFrameAt(with(offsetof(FrameHeader, version), &version, 2), 0, &f),
            FrameShape::kBadVersion);
  for (uint16_t flags : {0, kFrameDense | kFrameSparse, kFrameSparse | kFrameQuantized, 8}) {
    EXPECT_EQ(ReadFrameAt(with(offsetof(FrameHeader, flags), &flags, 2), 0, &f),
              FrameShape::kBadFlags)
        << flags;
  }
  const uint32_t bits = 3;
  EXPECT_EQ(ReadFrameAt(with(sizeof(FrameHeader), &bits, 4, 2), ends[1], &f), FrameShape::kBadBits);
  EXPECT_EQ(ReadFrameAt(Bytes(good.begin(), good.begin() + ends[1] + sizeof(FrameHeader) + 2),
                        ends[1], &f),
            FrameShape::kNoBits);
  // A payload longer than the message: the shape is read, fits() says no.
  ASSERT_EQ(ReadFrameAt(Bytes(good.begin(), good.begin() + ends[0] - 1), 0, &f), FrameShape::kOk);
  EXPECT_FALSE(f.fits());
  EXPECT_EQ(f.payload, 3u * 8);
}

}  // namespace
}  // namespace gradex
