// SpanStore: residuals and velocities follow their parameter spans across
// bucket layouts (DDP's rebuild), moved and never copied, so the total per
// span is conserved; bad layouts are refused without touching anything. And
// the saved-state blob: round trip (velocities included), version 1 still
// read, every corruption refused.
#include "pipeline/span_store.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "catalog/fnv1a.h"
#include "services/client/saved_state.h"

namespace gradex::client {
namespace {

using pipeline::ParamSpan;
using pipeline::SpanStore;

// Adds `per_span[key] * (i + 1)` to element i of each span in the slot and
// records what was added, per span and element.
void AddTo(pipeline::BucketSlot* slot, const std::vector<ParamSpan>& spans, float scale,
           std::map<uint64_t, std::vector<double>>* added) {
  size_t at = 0;
  for (const ParamSpan& s : spans) {
    auto& a = (*added)[s.key];
    a.resize(s.elements, 0.0);
    for (size_t i = 0; i < s.elements; ++i) {
      const float v = scale * static_cast<float>(s.key + i % 7);
      slot->residual[at + i] += v;
      a[i] += v;
    }
    at += s.elements;
  }
}

TEST(SpanStoreTest, RandomLayoutsConserveEverySpan) {
  const std::vector<size_t> sizes = {5, 1, 17, 3, 40, 8, 2};
  std::mt19937 rng(7);
  SpanStore store;
  std::map<uint64_t, std::vector<double>> added;
  for (int round = 0; round < 200; ++round) {
    // A random partition of a random subset of the spans into buckets.
    std::vector<uint64_t> keys;
    for (uint64_t k = 0; k < sizes.size(); ++k) {
      if (rng() % 3 != 0) keys.push_back(k);
    }
    std::shuffle(keys.begin(), keys.end(), rng);
    size_t i = 0;
    while (i < keys.size()) {
      const size_t take = 1 + rng() % 3;
      std::vector<ParamSpan> bucket;
      for (size_t j = i; j < std::min(keys.size(), i + take); ++j) {
        bucket.push_back({keys[j], sizes[keys[j]]});
      }
      i += take;
      absl::StatusOr<pipeline::BucketSlot*> slot = store.Gather(bucket);
      ASSERT_TRUE(slot.ok()) << slot.status();
      size_t n = 0;
      for (const ParamSpan& s : bucket) n += s.elements;
      ASSERT_EQ((*slot)->residual.size(), n);
      AddTo(*slot, bucket, static_cast<float>(round % 5 + 1), &added);
    }
  }
  const auto exported = store.Export().residuals;
  ASSERT_EQ(exported.size(), added.size());
  for (const auto& [key, values] : added) {
    ASSERT_EQ(exported.at(key).size(), values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_EQ(exported.at(key)[i], values[i]) << "span " << key << " element " << i;
    }
  }
  // Layouts whose spans all moved away are dropped.
  EXPECT_LE(store.layouts(), sizes.size());
}

TEST(SpanStoreTest, RebuildMovesResidualsIntoTheNewLayout) {
  SpanStore store;
  std::vector<ParamSpan> a = {{1, 2}, {2, 3}}, b = {{3, 1}};
  pipeline::BucketSlot* sa = *store.Gather(a);
  sa->residual = {1, 2, 3, 4, 5};
  (*store.Gather(b))->residual = {6};
  // Rebuilt: {2, 3} together, {1} alone.
  pipeline::BucketSlot* s23 = *store.Gather(std::vector<ParamSpan>{{2, 3}, {3, 1}});
  EXPECT_EQ(s23->residual, (std::vector<float>{3, 4, 5, 6}));
  pipeline::BucketSlot* s1 = *store.Gather(std::vector<ParamSpan>{{1, 2}});
  EXPECT_EQ(s1->residual, (std::vector<float>{1, 2}));
  EXPECT_EQ(store.layouts(), 2u) << "the old layouts are empty and dropped";
}

// What the client's selection thread asks before gathering a bucket while
// another exchanges: every slot the gathering would read or write.
TEST(SpanStoreTest, TouchedNamesEverySlotAGatherWouldUse) {
  SpanStore store;
  const std::vector<ParamSpan> a = {{1, 4}, {2, 3}}, b = {{3, 5}}, ab = {{2, 3}, {3, 5}};
  pipeline::BucketSlot* sa = *store.Gather(a);
  pipeline::BucketSlot* sb = *store.Gather(b);
  using Slots = std::vector<const pipeline::BucketSlot*>;
  EXPECT_EQ(store.Touched(a), (Slots{sa, sa, sa}));
  EXPECT_EQ(store.Touched(b), (Slots{sb, sb}));
  EXPECT_EQ(store.Touched(ab), (Slots{sa, sb})) << "a new layout moves spans out of a and b";
  const std::vector<ParamSpan> fresh = {{9, 2}};
  EXPECT_TRUE(store.Touched(fresh).empty()) << "new spans in a new layout touch nothing else";
  pipeline::BucketSlot* sab = *store.Gather(ab);
  EXPECT_EQ(store.Touched(ab), (Slots{sab, sab, sab}));
  EXPECT_EQ(store.Touched(a), (Slots{sa, sa, sab})) << "span 2 lives in ab now";
}

TEST(SpanStoreTest, BadLayoutsAreRefusedAndChangeNothing) {
  SpanStore store;
  (*store.Gather(std::vector<ParamSpan>{{1, 4}}))->residual = {1, 1, 1, 1};
  EXPECT_EQ(store.Gather(std::vector<ParamSpan>{}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Gather(std::vector<ParamSpan>{{1, 5}}).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "span 1 had 4 elements";
  EXPECT_EQ(store.Gather(std::vector<ParamSpan>{{2, 1}, {2, 1}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Gather(std::vector<ParamSpan>{{3, 0}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Export().residuals.at(1), (std::vector<float>{1, 1, 1, 1}));
  EXPECT_EQ(store.spans(), 1u);
}

// A velocity moves with its span's residual, and so does whether it has
// been set (a span's first step takes u = g); Export names only set ones.
TEST(SpanStoreTest, VelocitiesMoveWithTheirSpans) {
  SpanStore store;
  pipeline::BucketSlot* a = *store.Gather(std::vector<ParamSpan>{{1, 2}, {2, 1}});
  ASSERT_EQ(a->velocity.size(), 3u);
  ASSERT_EQ(a->velocity_live, (std::vector<uint8_t>{0, 0}));
  a->velocity = {1, 2, 3};
  a->velocity_live = {1, 0};
  pipeline::BucketSlot* b = *store.Gather(std::vector<ParamSpan>{{3, 1}, {1, 2}});
  EXPECT_EQ(b->velocity, (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(b->velocity_live, (std::vector<uint8_t>{0, 1}));
  pipeline::SpanState s = store.Export();
  EXPECT_EQ(s.velocities.size(), 1u);
  EXPECT_EQ(s.velocities.at(1), (std::vector<float>{1, 2}));
  // Import restores them; a velocity without its residual is refused.
  SpanStore other;
  ASSERT_TRUE(other.Import(s).ok());
  pipeline::BucketSlot* c = *other.Gather(std::vector<ParamSpan>{{1, 2}, {2, 1}, {3, 1}});
  EXPECT_EQ(c->velocity, (std::vector<float>{1, 2, 0, 0}));
  EXPECT_EQ(c->velocity_live, (std::vector<uint8_t>{1, 0, 0}));
  pipeline::SpanState bad;
  bad.velocities[9] = {1};
  EXPECT_EQ(other.Import(bad).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(other.spans(), 3u) << "a refused import changes nothing";
}

TEST(SavedStateTest, RoundTripAndEveryCorruptionRefused) {
  SavedState s;
  s.step = 1234;
  s.residuals[7] = {1.5f, -2.0f, 0.0f};
  s.residuals[1ull << 40] = {3.0f};
  s.velocities[7] = {0.25f, -0.0f, 8.0f};
  const std::string blob = EncodeState(s);
  absl::StatusOr<SavedState> back = DecodeState(blob);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->step, 1234u);
  EXPECT_EQ(back->residuals, s.residuals);
  EXPECT_EQ(back->velocities, s.velocities);
  // Every single-byte change and every truncation is refused, never a crash.
  for (size_t i = 0; i < blob.size(); ++i) {
    std::string bad = blob;
    bad[i] ^= 0x5a;
    EXPECT_EQ(DecodeState(bad).status().code(), absl::StatusCode::kInvalidArgument) << i;
    EXPECT_EQ(DecodeState(blob.substr(0, i)).status().code(), absl::StatusCode::kInvalidArgument)
        << i;
  }
  EXPECT_EQ(DecodeState(blob + "x").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeState("").status().code(), absl::StatusCode::kInvalidArgument);
  // A huge span count with a valid checksum: bounded before any allocation.
  SavedState empty;
  std::string forged = EncodeState(empty);
  forged.resize(forged.size() - 8);
  const uint64_t spans = ~uint64_t{0};
  std::memcpy(forged.data() + 20, &spans, 8);
  const uint64_t h = catalog::Fnv1a(forged, catalog::kFnv1aTruncatedBasis);
  forged.append(reinterpret_cast<const char*>(&h), 8);
  absl::Status st = DecodeState(forged).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("do not fit"), std::string::npos) << st;
}

// A version 1 blob (no velocities, written by gradex 0.1.0) is still read.
TEST(SavedStateTest, VersionOneIsRead) {
  std::string v1("GRDXSTAT", 8);
  auto put = [&v1](auto v) { v1.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(uint32_t{1});
  put(uint64_t{77});  // step
  put(uint64_t{1});   // spans
  put(uint64_t{5});   // key
  put(uint64_t{2});   // elements
  put(1.0f);
  put(-3.0f);
  put(catalog::Fnv1a(v1, catalog::kFnv1aTruncatedBasis));
  absl::StatusOr<SavedState> s = DecodeState(v1);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->step, 77u);
  EXPECT_EQ(s->residuals.at(5), (std::vector<float>{1.0f, -3.0f}));
  EXPECT_TRUE(s->velocities.empty());
}

}  // namespace
}  // namespace gradex::client
