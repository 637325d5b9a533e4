// QSGD: layout, reproducibility, statistical unbiasedness, and the decoder's
// validation of quantized dense frames.
#include "collectives/wire/qsgd.h"

#include <cmath>
#include <cstring>
#include <random>

#include "gtest/gtest.h"
#include "kernels/qsgd.h"

namespace gradex {
namespace {

std::vector<float> Values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(n);
  // Buckets of different magnitudes, some zeros.
  for (size_t i = 0; i < n; ++i) x[i] = i % 37 == 0 ? 0.0f : d(rng) * (1.0f + (i / 1024) * 3.0f);
  return x;
}

std::vector<float> RoundTrip(const std::vector<float>& x, int bits, uint64_t seed) {
  std::vector<uint8_t> buf(kernels::QsgdPayloadBytes(x.size(), bits));
  kernels::QsgdEncode(x.data(), x.size(), bits, seed, buf.data());
  std::vector<float> y(x.size());
  EXPECT_EQ(kernels::QsgdDecode(buf.data(), buf.size(), x.size(), y.data()), nullptr);
  return y;
}

float BucketScale(const std::vector<float>& x, size_t i) {
  size_t b0 = i / kernels::kQsgdBucket * kernels::kQsgdBucket;
  float s = 0;
  for (size_t j = b0; j < std::min(x.size(), b0 + kernels::kQsgdBucket); ++j) {
    s = std::max(s, std::fabs(x[j]));
  }
  return s;
}

TEST(QsgdTest, PayloadLayout) {
  // 8-byte prefix, a scale per started bucket, codes packed in 32-bit words.
  EXPECT_EQ(kernels::QsgdPayloadBytes(1024, 8), 8u + 4 + 1024);
  EXPECT_EQ(kernels::QsgdPayloadBytes(1025, 4), 8u + 8 + 4 * 129);
  EXPECT_EQ(kernels::QsgdPayloadBytes(3, 2), 8u + 4 + 4);
  EXPECT_EQ(collectives::wire::QuantizedFrameBytes(1000, 2), 48u + 8 + 4 + 4 * 63);
}

TEST(QsgdTest, WithinOneStepZerosExactScaleExact) {
  const auto x = Values(3000, 1);
  for (int bits : {2, 4, 8}) {
    const auto y = RoundTrip(x, bits, 99);
    for (size_t i = 0; i < x.size(); ++i) {
      const float step = kernels::QsgdStep(BucketScale(x, i), bits);
      ASSERT_LE(std::fabs(y[i] - x[i]), step * 1.0001f) << i;
      if (x[i] == 0) {
        ASSERT_EQ(y[i], 0.0f);
      }
      if (std::fabs(x[i]) == BucketScale(x, i)) {
        ASSERT_EQ(y[i], x[i]) << "max of its bucket";
      }
    }
  }
}

TEST(QsgdTest, SameSeedSameBytesOtherSeedOtherBytes) {
  const auto x = Values(2048, 2);
  EXPECT_EQ(RoundTrip(x, 4, 5), RoundTrip(x, 4, 5));
  EXPECT_NE(RoundTrip(x, 4, 5), RoundTrip(x, 4, 6));
  const collectives::wire::FrameMeta meta{1, 2, 3,
                                          collectives::wire::CatalogId("sparcml-dsar-split"), 2};
  EXPECT_NE(collectives::wire::QsgdSeed(meta, 0, {0, 10}),
            collectives::wire::QsgdSeed(meta, 1, {0, 10}));
  EXPECT_NE(collectives::wire::QsgdSeed(meta, 0, {0, 10}),
            collectives::wire::QsgdSeed(meta, 0, {10, 20}));
  collectives::wire::FrameMeta next = meta;
  next.step = 4;
  EXPECT_NE(collectives::wire::QsgdSeed(meta, 0, {0, 10}),
            collectives::wire::QsgdSeed(next, 0, {0, 10}));
}

// Unbiasedness: over T seeds, the mean of decode(encode(x_i)) is within
// 5 sigma_i / sqrt(T) of x_i for every element, sigma_i = step·sqrt(p(1-p))
// with p the fractional part of x_i / step (the exact spread of the two-level
// rounding), plus 1e-5 of a step for float rounding. The mean squared
// z-score must be near 1: the spread is the one QSGD promises. A bias of a
// quarter step would break the bound for most elements (checked too).
TEST(QsgdTest, UnbiasedOverSeeds) {
  const auto x = Values(2500, 3);
  constexpr int kTrials = 3000;
  for (int bits : {2, 4, 8}) {
    SCOPED_TRACE("bits=" + std::to_string(bits));
    std::vector<double> sum(x.size(), 0.0);
    for (int t = 0; t < kTrials; ++t) {
      const auto y = RoundTrip(x, bits, 1000 + t);
      for (size_t i = 0; i < x.size(); ++i) sum[i] += y[i];
    }
    double z2 = 0;
    int spread = 0, biased_caught = 0, moving = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double step = kernels::QsgdStep(BucketScale(x, i), bits);
      if (step == 0) continue;
      const double v = x[i] / step;
      const double p = v - std::floor(v);
      const double sigma = step * std::sqrt(p * (1 - p));
      const double mean = sum[i] / kTrials;
      const double bound = 5 * sigma / std::sqrt(kTrials) + 1e-5 * step;
      ASSERT_LE(std::fabs(mean - x[i]), bound) << "element " << i << " x=" << x[i];
      if (sigma > 1e-3 * step) {
        z2 += std::pow((mean - x[i]) / (sigma / std::sqrt(kTrials)), 2);
        ++spread;
      }
      if (p > 0.05 && p < 0.95) {
        ++moving;
        biased_caught += std::fabs(mean + 0.25 * step - x[i]) > bound;
      }
    }
    ASSERT_GT(spread, 1000);
    EXPECT_NEAR(z2 / spread, 1.0, 0.15);
    EXPECT_GT(biased_caught, moving * 9 / 10);
  }
}

TEST(QsgdTest, NonFiniteValuesStayAtZeroWithAFiniteScale) {
  std::vector<float> x = {1.0f, INFINITY, -2.0f, NAN};
  const auto y = RoundTrip(x, 8, 1);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_EQ(y[2], -2.0f);
}

// Quantized dense frames through the frame decoder.
const collectives::wire::FrameMeta kMeta{7, 3, 11,
                                         collectives::wire::CatalogId("sparcml-dsar-split"), 2};
const collectives::wire::BlockRange kRange{100, 1300};

transport::Bytes GoodFrame(int bits, std::vector<float>* decoded) {
  const auto x = Values(kRange.size(), 4);
  transport::Bytes b;
  collectives::wire::AppendQuantizedFrame(kMeta, kRange, x.data(), bits, 17, &b, decoded);
  return b;
}

uint8_t* Payload(transport::Bytes* b) { return b->data() + sizeof(collectives::wire::FrameHeader); }

void ExpectRejected(const transport::Bytes& b, collectives::wire::FrameError reason) {
  auto before = collectives::wire::FrameErrorCounts()[static_cast<int>(reason)];
  std::vector<float> out(kRange.size());
  absl::Status s = collectives::wire::DecodeDenseBlock(b, kMeta, kRange, false, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(std::string(s.message()).find(collectives::wire::FrameErrorName(reason)),
            std::string::npos)
      << s;
  EXPECT_EQ(collectives::wire::FrameErrorCounts()[static_cast<int>(reason)], before + 1);
}

TEST(QsgdFrameTest, RoundTripThroughBothDecoders) {
  for (int bits : {2, 4, 8}) {
    std::vector<float> decoded;
    transport::Bytes b = GoodFrame(bits, &decoded);
    EXPECT_EQ(b.size(), collectives::wire::QuantizedFrameBytes(kRange.size(), bits));
    collectives::wire::FrameHeader h;
    std::memcpy(&h, b.data(), sizeof h);
    EXPECT_EQ(h.flags, collectives::wire::kFrameDense | collectives::wire::kFrameQuantized);
    std::vector<float> out(kRange.size(), 1.0f);
    ASSERT_TRUE(collectives::wire::DecodeDenseBlock(b, kMeta, kRange, false, out.data()).ok());
    EXPECT_EQ(out, decoded);
    ASSERT_TRUE(collectives::wire::DecodeDenseBlock(b, kMeta, kRange, true, out.data()).ok());
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], decoded[i] + decoded[i]);
    std::vector<kernels::SparseVec> sparse;
    const collectives::wire::ExpectedBlock want{kRange, 0};
    ASSERT_TRUE(collectives::wire::DecodeSparseBlocks(b, kMeta, {&want, 1}, &sparse).ok());
    std::vector<float> dense(kRange.size());
    kernels::SparseToDense(kernels::View(sparse[0]), kRange.begin, dense.data(), dense.size());
    EXPECT_EQ(dense, decoded);
  }
}

TEST(QsgdFrameTest, RejectsEveryMalformedField) {
  std::vector<float> d;
  auto with_bits = [&](uint32_t bits) {
    transport::Bytes b = GoodFrame(4, &d);
    std::memcpy(Payload(&b), &bits, 4);
    return b;
  };
  ExpectRejected(with_bits(3), collectives::wire::FrameError::kBadFlags);
  ExpectRejected(with_bits(16), collectives::wire::FrameError::kBadFlags);
  ExpectRejected(with_bits(0), collectives::wire::FrameError::kBadFlags);
  // 2 bits declared on a 4-bit payload: the length no longer matches.
  ExpectRejected(with_bits(2), collectives::wire::FrameError::kBadLength);
  {
    transport::Bytes b = GoodFrame(4, &d);
    uint32_t bucket = 512;
    std::memcpy(Payload(&b) + 4, &bucket, 4);
    ExpectRejected(b, collectives::wire::FrameError::kBadQuantized);
  }
  for (float scale : {NAN, INFINITY, -1.0f}) {
    transport::Bytes b = GoodFrame(4, &d);
    std::memcpy(Payload(&b) + 8, &scale, 4);
    ExpectRejected(b, collectives::wire::FrameError::kBadQuantized);
  }
  {
    transport::Bytes b = GoodFrame(4, &d);  // code 15 is above the top level 2·7
    Payload(&b)[8 + 8] |= 0x0f;
    ExpectRejected(b, collectives::wire::FrameError::kBadQuantized);
  }
  {
    transport::Bytes b = GoodFrame(2, &d);  // code 3 is above the top level 2·1
    Payload(&b)[8 + 8] |= 0x03;
    ExpectRejected(b, collectives::wire::FrameError::kBadQuantized);
  }
  {
    // 1200 values at 8 bits fill their words exactly; at 2 bits too; use a
    // range whose last word is partial to test the padding.
    const collectives::wire::BlockRange odd{0, 1201};
    const auto x = Values(odd.size(), 5);
    transport::Bytes b;
    collectives::wire::AppendQuantizedFrame(kMeta, odd, x.data(), 8, 1, &b, &d);
    b.back() |= 0x80;  // a padding bit of the last word
    std::vector<float> out(odd.size());
    absl::Status s = collectives::wire::DecodeDenseBlock(b, kMeta, odd, false, out.data());
    EXPECT_NE(std::string(s.message()).find("padding"), std::string::npos) << s;
  }
  {
    transport::Bytes b = GoodFrame(4, &d);
    b.resize(b.size() - 4);
    ExpectRejected(b, collectives::wire::FrameError::kTruncated);
  }
  {
    transport::Bytes b = GoodFrame(4, &d);
    b.resize(b.size() + 4, 0);
    ExpectRejected(b, collectives::wire::FrameError::kBadLength);
  }
  {
    transport::Bytes b = GoodFrame(4, &d);
    collectives::wire::FrameHeader h;
    std::memcpy(&h, b.data(), sizeof h);
    h.flags = collectives::wire::kFrameSparse | collectives::wire::kFrameQuantized;
    std::memcpy(b.data(), &h, sizeof h);
    ExpectRejected(b, collectives::wire::FrameError::kBadFlags);
    h.flags = collectives::wire::kFrameDense | collectives::wire::kFrameQuantized | 8;
    std::memcpy(b.data(), &h, sizeof h);
    ExpectRejected(b, collectives::wire::FrameError::kBadFlags);
  }
}

TEST(QsgdFrameTest, BitsOption) {
  EXPECT_TRUE(collectives::wire::ValidateQuantizeBits(0).ok());
  for (int b : {2, 4, 8}) EXPECT_TRUE(collectives::wire::ValidateQuantizeBits(b).ok());
  for (int b : {1, 3, 16, -2}) EXPECT_FALSE(collectives::wire::ValidateQuantizeBits(b).ok());
}

}  // namespace
}  // namespace gradex
