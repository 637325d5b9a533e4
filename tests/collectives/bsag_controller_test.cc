#include "collectives/algorithms/bsag_controller.h"

#include "gtest/gtest.h"

namespace gradex {
namespace {

TEST(BsagControllerTest, StartsAtKOverTAndStaysInRange) {
  collectives::algorithms::BsagController c;
  EXPECT_EQ(c.KPrime(1000, 4), 250u);
  EXPECT_EQ(c.step(), 7);  // (1000 - 250) / 100
  for (int i = 0; i < 200; ++i) {
    c.Update(i % 3 == 0 ? 5000 : 10);
    size_t k = c.KPrime(1000, 4);
    EXPECT_GE(k, 250u);
    EXPECT_LE(k, 1000u);
  }
}

TEST(BsagControllerTest, GrowsWhileTooFewAndDoublesOnRightMoves) {
  collectives::algorithms::BsagController c;
  c.KPrime(1000, 4);
  c.Update(100);  // too few, step +7 right: 257
  EXPECT_EQ(c.KPrime(1000, 4), 257u);
  c.Update(100);  // second right move in a row: step doubles to 14
  EXPECT_EQ(c.step(), 14);
  EXPECT_EQ(c.KPrime(1000, 4), 271u);
  c.Update(2000);  // too many: wrong direction, reverse and halve
  EXPECT_EQ(c.step(), -7);
  EXPECT_EQ(c.KPrime(1000, 4), 264u);
}

// Converges to the k' where the post-gather count crosses k_block, for a
// synthetic overlap model u = 3.2 k' (k' = 312.5 gives u = k_block).
TEST(BsagControllerTest, SettlesNearTheCrossing) {
  collectives::algorithms::BsagController c;
  size_t k = c.KPrime(1000, 4);
  for (int i = 0; i < 300; ++i) {
    c.Update(static_cast<size_t>(3.2 * k));
    k = c.KPrime(1000, 4);
  }
  EXPECT_NEAR(double(k), 312.5, 8.0);
}

TEST(BsagControllerTest, ResetsWhenBlockOrTeamsChange) {
  collectives::algorithms::BsagController c;
  c.KPrime(1000, 4);
  c.Update(10);
  EXPECT_EQ(c.KPrime(900, 3), 300u);
}

}  // namespace
}  // namespace gradex
