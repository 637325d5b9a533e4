#include "member/backoff.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <vector>

namespace gradex {
namespace {

using std::chrono::milliseconds;

TEST(BackoffTest, GrowsExponentiallyToTheCapWithoutJitter) {
  member::Backoff b({milliseconds(100), milliseconds(1000), 2.0, 0.0}, 1);
  std::vector<int64_t> got;
  for (int i = 0; i < 7; ++i) got.push_back(b.Next().count());
  EXPECT_EQ(got, (std::vector<int64_t>{100, 200, 400, 800, 1000, 1000, 1000}));
  EXPECT_EQ(b.delays(), 7);
}

TEST(BackoffTest, ResetStartsOver) {
  member::Backoff b({milliseconds(50), milliseconds(5000), 3.0, 0.0}, 1);
  EXPECT_EQ(b.Next().count(), 50);
  EXPECT_EQ(b.Next().count(), 150);
  b.Reset();
  EXPECT_EQ(b.delays(), 0);
  EXPECT_EQ(b.Next().count(), 50);
}

TEST(BackoffTest, JitterStaysInItsBandAndNeverPassesTheCap) {
  const member::BackoffOptions o{milliseconds(100), milliseconds(2000), 2.0, 0.25};
  for (uint64_t seed = 0; seed < 200; ++seed) {
    member::Backoff b(o, seed);
    double base = 100;
    for (int i = 0; i < 10; ++i) {
      const double d = static_cast<double>(b.Next().count());
      EXPECT_GE(d, std::floor(base * 0.75)) << "seed " << seed << " delay " << i;
      EXPECT_LE(d, std::min(2000.0, std::ceil(base * 1.25))) << "seed " << seed << " delay " << i;
      base = std::min(2000.0, base * 2);
    }
  }
}

TEST(BackoffTest, SeedsDecorrelateAgents) {
  // Agents that lost the coordinator at the same moment must not retry in
  // lockstep: the first delays of different seeds differ.
  std::set<int64_t> first;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    member::Backoff b({milliseconds(1000), milliseconds(5000), 2.0, 0.2}, seed);
    first.insert(b.Next().count());
  }
  EXPECT_GT(first.size(), 20u);
}

TEST(BackoffTest, LongOutagesDoNotOverflow) {
  member::Backoff b({milliseconds(100), milliseconds(3000), 10.0, 0.0}, 1);
  for (int i = 0; i < 1000; ++i) b.Next();
  EXPECT_EQ(b.Next().count(), 3000);
}

TEST(BackoffTest, OnlyTransientJoinErrorsAreRetried) {
  EXPECT_TRUE(member::IsTransientJoinError(absl::StatusCode::kUnavailable));
  EXPECT_TRUE(member::IsTransientJoinError(absl::StatusCode::kDeadlineExceeded));
  // A restarted agent waits for its previous process's lease to lapse.
  EXPECT_TRUE(member::IsTransientJoinError(absl::StatusCode::kAlreadyExists));
  for (absl::StatusCode c :
       {absl::StatusCode::kUnauthenticated, absl::StatusCode::kInvalidArgument,
        absl::StatusCode::kFailedPrecondition, absl::StatusCode::kResourceExhausted,
        absl::StatusCode::kPermissionDenied, absl::StatusCode::kOk}) {
    EXPECT_FALSE(member::IsTransientJoinError(c)) << absl::StatusCodeToString(c);
  }
}

}  // namespace
}  // namespace gradex
