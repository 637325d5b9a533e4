// ResidualStore: residuals follow their parameter spans across bucket
// layouts (DDP's rebuild), moved and never copied, so the total per span is
// conserved; bad layouts are refused without touching anything. And the
// saved-state blob: round trip, every corruption refused.
#include "services/client/residual_store.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "services/client/saved_state.h"

namespace gradex::client {
namespace {

// Adds `per_span[key] * (i + 1)` to element i of each span in the slot and
// records what was added, per span and element.
void AddTo(agent::BucketSlot* slot, const std::vector<ParamSpan>& spans, float scale,
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

TEST(ResidualStoreTest, RandomLayoutsConserveEverySpan) {
  const std::vector<size_t> sizes = {5, 1, 17, 3, 40, 8, 2};
  std::mt19937 rng(7);
  ResidualStore store;
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
      absl::StatusOr<agent::BucketSlot*> slot = store.Gather(bucket);
      ASSERT_TRUE(slot.ok()) << slot.status();
      size_t n = 0;
      for (const ParamSpan& s : bucket) n += s.elements;
      ASSERT_EQ((*slot)->residual.size(), n);
      AddTo(*slot, bucket, static_cast<float>(round % 5 + 1), &added);
    }
  }
  const auto exported = store.Export();
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

TEST(ResidualStoreTest, RebuildMovesResidualsIntoTheNewLayout) {
  ResidualStore store;
  std::vector<ParamSpan> a = {{1, 2}, {2, 3}}, b = {{3, 1}};
  agent::BucketSlot* sa = *store.Gather(a);
  sa->residual = {1, 2, 3, 4, 5};
  (*store.Gather(b))->residual = {6};
  // Rebuilt: {2, 3} together, {1} alone.
  agent::BucketSlot* s23 = *store.Gather(std::vector<ParamSpan>{{2, 3}, {3, 1}});
  EXPECT_EQ(s23->residual, (std::vector<float>{3, 4, 5, 6}));
  agent::BucketSlot* s1 = *store.Gather(std::vector<ParamSpan>{{1, 2}});
  EXPECT_EQ(s1->residual, (std::vector<float>{1, 2}));
  EXPECT_EQ(store.layouts(), 2u) << "the old layouts are empty and dropped";
}

// What the client's selection thread asks before gathering a bucket while
// another exchanges: every slot the gathering would read or write.
TEST(ResidualStoreTest, TouchedNamesEverySlotAGatherWouldUse) {
  ResidualStore store;
  const std::vector<ParamSpan> a = {{1, 4}, {2, 3}}, b = {{3, 5}}, ab = {{2, 3}, {3, 5}};
  agent::BucketSlot* sa = *store.Gather(a);
  agent::BucketSlot* sb = *store.Gather(b);
  using Slots = std::vector<const agent::BucketSlot*>;
  EXPECT_EQ(store.Touched(a), (Slots{sa, sa, sa}));
  EXPECT_EQ(store.Touched(b), (Slots{sb, sb}));
  EXPECT_EQ(store.Touched(ab), (Slots{sa, sb})) << "a new layout moves spans out of a and b";
  const std::vector<ParamSpan> fresh = {{9, 2}};
  EXPECT_TRUE(store.Touched(fresh).empty()) << "new spans in a new layout touch nothing else";
  agent::BucketSlot* sab = *store.Gather(ab);
  EXPECT_EQ(store.Touched(ab), (Slots{sab, sab, sab}));
  EXPECT_EQ(store.Touched(a), (Slots{sa, sa, sab})) << "span 2 lives in ab now";
}

TEST(ResidualStoreTest, BadLayoutsAreRefusedAndChangeNothing) {
  ResidualStore store;
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
  EXPECT_EQ(store.Export().at(1), (std::vector<float>{1, 1, 1, 1}));
  EXPECT_EQ(store.spans(), 1u);
}

TEST(SavedStateTest, RoundTripAndEveryCorruptionRefused) {
  SavedState s;
  s.step = 1234;
  s.residuals[7] = {1.5f, -2.0f, 0.0f};
  s.residuals[1ull << 40] = {3.0f};
  const std::string blob = EncodeState(s);
  absl::StatusOr<SavedState> back = DecodeState(blob);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->step, 1234u);
  EXPECT_EQ(back->residuals, s.residuals);
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
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : forged) h = (h ^ c) * 1099511628211ull;
  forged.append(reinterpret_cast<const char*>(&h), 8);
  absl::Status st = DecodeState(forged).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("do not fit"), std::string::npos) << st;
}

}  // namespace
}  // namespace gradex::client
