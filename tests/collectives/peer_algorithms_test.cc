// Algorithm-specific checks of the peer algorithms (dense-rabenseifner, topka,
// gaussiank, gtopk), beyond the shared invariant sweep.
#include <cmath>
#include <string>

#include "collectives/block_layout.h"
#include "gtest/gtest.h"
#include "tests/collectives/harness.h"

namespace gradex::testing {
namespace {

int FloorPow2(int p) {
  int p2 = 1;
  while (p2 * 2 <= p) p2 *= 2;
  return p2;
}

int Log2(int p2) {
  int l = 0;
  while ((1 << l) < p2) ++l;
  return l;
}

// Integer gradients sum exactly in any order, so Rabenseifner's result must be
// dense-ring's bit for bit, including N < P (empty blocks).
TEST(DenseRabenseifnerTest, EqualsDenseRingOnIntegers) {
  for (int p = 1; p <= 9; ++p) {
    for (size_t n : {size_t{10007}, size_t{5}, size_t{1}}) {
      SCOPED_TRACE("P=" + std::to_string(p) + " N=" + std::to_string(n));
      auto mine = RunAlgorithm("dense-rabenseifner", p, n, {0.01, 1, 0}, 2, Values::kIntegers, 9);
      auto ring = RunAlgorithm("dense-ring", p, n, {0.01, 1, 0}, 2, Values::kIntegers, 9);
      for (int it = 0; it < 2; ++it) {
        for (int r = 0; r < p; ++r) {
          ASSERT_TRUE(mine[it][r].status.ok()) << mine[it][r].status;
          EXPECT_EQ(mine[it][r].result, ring[it][r].result);
          EXPECT_EQ(mine[it][r].stats.result_capacity, n);
        }
      }
    }
  }
}

// Bytes per rank are the closed form 2(p2-1)/p2 * 4n plus one 48-byte header
// per message (2 log2 p2 messages), and a folded pair moves the whole gradient
// (4n + 48) once more each way. n divisible by every p2 makes it exact.
TEST(DenseRabenseifnerTest, BytesAreTheClosedForm) {
  const size_t n = 8 * 1250;
  for (int p = 1; p <= 9; ++p) {
    SCOPED_TRACE("P=" + std::to_string(p));
    auto runs = RunAlgorithm("dense-rabenseifner", p, n, {0.01, 1, 0}, 1, Values::kGrid, 3);
    const int p2 = FloorPow2(p), r = p - p2;
    const uint64_t active = 2 * (p2 - 1) * 4 * n / p2 + 48 * 2 * Log2(p2);
    const uint64_t whole = 4 * n + 48;
    for (int rank = 0; rank < p; ++rank) {
      const CallStats& s = runs[0][rank].stats;
      ASSERT_TRUE(runs[0][rank].status.ok());
      uint64_t want = active;
      uint64_t messages = 2 * Log2(p2);
      if (rank < 2 * r && rank % 2 == 0) {
        want = whole, messages = 1;
      } else if (rank < 2 * r) {
        want += whole, messages += 1;
      }
      EXPECT_EQ(s.sent_bytes, want) << "rank " << rank;
      EXPECT_EQ(s.recv_bytes, want) << "rank " << rank;
      EXPECT_EQ(s.messages_sent, messages) << "rank " << rank;
    }
  }
}

}  // namespace
}  // namespace gradex::testing
