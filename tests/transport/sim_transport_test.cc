// The simulated transport's clock arithmetic, exactly, on small schedules.
// Parameters are powers of two so every expected time is exact in binary.
// (Delivery, matching and errors are covered by the conformance suite.)
#include "transport/sim_transport.h"

#include <chrono>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "transport/loopback_transport.h"

namespace gradex {
namespace {

constexpr double kAlpha = 0.25;
constexpr double kBeta = 0.0625;  // per byte
const transport::Deadline kFar = transport::Clock::now() + std::chrono::seconds(30);

std::vector<std::unique_ptr<transport::Transport>> World(int p, double gamma = 0) {
  return transport::CreateSimTransports(p, transport::SimParams{kAlpha, kBeta, gamma});
}

// Receives one message from `peer` on `tag`, returning its size.
size_t Receive(transport::Transport& t, int peer, uint64_t tag) {
  absl::StatusOr<transport::RequestId> r = t.PostRecv(peer, tag);
  EXPECT_TRUE(r.ok()) << r.status();
  transport::Bytes got;
  absl::Status s = t.Wait(*r, kFar, &got);
  EXPECT_TRUE(s.ok()) << s;
  return got.size();
}

transport::RequestId Send(transport::Transport& t, int peer, uint64_t tag, size_t bytes) {
  absl::StatusOr<transport::RequestId> s = t.PostSend(peer, tag, transport::Bytes(bytes, 7));
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

TEST(SimTransport, OneMessage) {
  auto w = World(2);
  transport::RequestId s = Send(*w[0], 1, 3, 16);
  EXPECT_EQ(transport::SimNow(*w[0]), 0.0);  // posting is free
  EXPECT_EQ(Receive(*w[1], 0, 3), 16u);
  EXPECT_EQ(transport::SimNow(*w[1]), kAlpha + kBeta * 16);
  ASSERT_TRUE(w[0]->Wait(s, kFar, nullptr).ok());
  EXPECT_EQ(transport::SimNow(*w[0]), kAlpha + kBeta * 16);
}

TEST(SimTransport, ReceiverAlreadyLaterKeepsItsClock) {
  auto w = World(2);
  ASSERT_TRUE(transport::SimResetClock(*w[1], 100));
  Send(*w[0], 1, 3, 16);
  Receive(*w[1], 0, 3);
  EXPECT_EQ(transport::SimNow(*w[1]), 100.0);
}

TEST(SimTransport, TwoSendsAtOnceSerialiseOnTheLink) {
  auto w = World(3);
  transport::RequestId a = Send(*w[0], 1, 1, 16);
  transport::RequestId b = Send(*w[0], 2, 1, 32);
  Receive(*w[2], 0, 1);
  EXPECT_EQ(transport::SimNow(*w[2]), 2 * kAlpha + kBeta * (16 + 32));
  Receive(*w[1], 0, 1);
  EXPECT_EQ(transport::SimNow(*w[1]), kAlpha + kBeta * 16);
  ASSERT_TRUE(w[0]->Wait(a, kFar, nullptr).ok());
  EXPECT_EQ(transport::SimNow(*w[0]), kAlpha + kBeta * 16);
  ASSERT_TRUE(w[0]->Wait(b, kFar, nullptr).ok());
  EXPECT_EQ(transport::SimNow(*w[0]), 2 * kAlpha + kBeta * 48);
}

TEST(SimTransport, SendAfterTheLinkIsFreeStartsAtTheSendersClock) {
  auto w = World(2);
  Send(*w[0], 1, 1, 16);  // link busy until 1.25
  ASSERT_TRUE(transport::SimResetClock(*w[0], 10));
  Send(*w[0], 1, 2, 16);
  Receive(*w[1], 0, 1);
  Receive(*w[1], 0, 2);
  EXPECT_EQ(transport::SimNow(*w[1]), 10 + kAlpha + kBeta * 16);
}

TEST(SimTransport, ChainAccumulates) {
  auto w = World(3);
  Send(*w[0], 1, 1, 16);
  Receive(*w[1], 0, 1);
  Send(*w[1], 2, 1, 48);
  Receive(*w[2], 1, 1);
  EXPECT_EQ(transport::SimNow(*w[2]), 2 * kAlpha + kBeta * (16 + 48));
}

// P-1 steps of send-right/receive-left: every rank ends at (P-1)(α + βm).
TEST(SimTransport, RingOfFive) {
  constexpr int kP = 5;
  constexpr size_t kM = 64;
  auto w = World(kP);
  for (int step = 0; step < kP - 1; ++step) {
    std::vector<transport::RequestId> sends, recvs;
    for (int r = 0; r < kP; ++r) {
      recvs.push_back(*w[r]->PostRecv((r + kP - 1) % kP, step));
      sends.push_back(Send(*w[r], (r + 1) % kP, step, kM));
    }
    for (int r = 0; r < kP; ++r) {
      ASSERT_TRUE(w[r]->Wait(recvs[r], kFar, nullptr).ok());
      ASSERT_TRUE(w[r]->Wait(sends[r], kFar, nullptr).ok());
    }
  }
  for (int r = 0; r < kP; ++r)
    EXPECT_EQ(transport::SimNow(*w[r]), (kP - 1) * (kAlpha + kBeta * kM));
}

TEST(SimTransport, GammaPerReceivedWord) {
  constexpr double kGamma = 0.5;
  auto w = World(2, kGamma);
  Send(*w[0], 1, 1, 16);
  Receive(*w[1], 0, 1);
  EXPECT_EQ(transport::SimNow(*w[1]), kAlpha + kBeta * 16 + kGamma * 4);
}

TEST(SimTransport, SelfMessageIsFree) {
  auto w = World(2);
  ASSERT_TRUE(transport::SimResetClock(*w[0], 3));
  transport::RequestId s = Send(*w[0], 0, 1, 1000);
  Receive(*w[0], 0, 1);
  ASSERT_TRUE(w[0]->Wait(s, kFar, nullptr).ok());
  EXPECT_EQ(transport::SimNow(*w[0]), 3.0);
  Send(*w[0], 1, 2, 16);  // and it did not occupy the link
  Receive(*w[1], 0, 2);
  EXPECT_EQ(transport::SimNow(*w[1]), 3 + kAlpha + kBeta * 16);
}

TEST(SimTransport, TestOnASendAdvancesTheClock) {
  auto w = World(2);
  transport::RequestId s = Send(*w[0], 1, 1, 16);
  absl::StatusOr<bool> done = w[0]->Test(s, nullptr);
  ASSERT_TRUE(done.ok() && *done);
  EXPECT_EQ(transport::SimNow(*w[0]), kAlpha + kBeta * 16);
}

TEST(SimTransport, ResetFreesTheLinkAndOtherTransportsAreNotSim) {
  auto w = World(2);
  Send(*w[0], 1, 1, 1 << 20);
  Receive(*w[1], 0, 1);
  ASSERT_TRUE(transport::SimResetClock(*w[0], 0));
  Send(*w[0], 1, 2, 16);
  Receive(*w[1], 0, 2);  // w[1]'s clock is already far later
  ASSERT_TRUE(transport::SimResetClock(*w[1], 0));
  Send(*w[0], 1, 3, 16);
  Receive(*w[1], 0, 3);
  // The second and third sends queue only behind each other, not behind the first.
  EXPECT_EQ(transport::SimNow(*w[1]), 2 * (kAlpha + kBeta * 16));
  auto lb = transport::CreateLoopbackTransports(1);
  EXPECT_EQ(transport::SimNow(*lb[0]), -1.0);
  EXPECT_FALSE(transport::SimResetClock(*lb[0], 0));
}

TEST(SimTransport, KilledPeerFailsWaiters) {
  auto w = World(2);
  transport::RequestId r = *w[1]->PostRecv(0, 1);
  transport::KillSimRank(*w[1], 0);
  absl::Status s = w[1]->Wait(r, kFar, nullptr);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
}

}  // namespace
}  // namespace gradex
