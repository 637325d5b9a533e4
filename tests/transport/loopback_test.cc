// Loopback-only behaviour: killing a rank.
#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "transport/loopback_transport.h"

namespace gradex {
namespace {

using std::chrono::milliseconds;

TEST(LoopbackTest, KilledPeerFailsWaiterFast) {
  auto ts = transport::CreateLoopbackTransports(3);
  auto r = ts[0]->PostRecv(1, 4);
  ASSERT_TRUE(r.ok());
  std::thread killer([&] {
    std::this_thread::sleep_for(milliseconds(50));
    transport::KillLoopbackRank(*ts[2], 1);
  });
  auto start = transport::Clock::now();
  absl::Status s = ts[0]->Wait(*r, transport::DeadlineIn(milliseconds(5000)), nullptr);
  killer.join();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_NE(s.message().find("peer 1 is dead"), std::string::npos) << s;
  EXPECT_LT(transport::Clock::now() - start, milliseconds(2000));
  // Sends to the dead rank and the dead rank's own calls fail.
  EXPECT_TRUE(absl::IsUnavailable(ts[0]->PostSend(1, 4, transport::Bytes(3)).status()));
  EXPECT_FALSE(ts[1]->PostSend(0, 4, transport::Bytes(3)).ok());
  EXPECT_FALSE(ts[1]->PostRecv(0, 4).ok());
  // Survivors still talk to each other.
  auto s2 = ts[2]->PostSend(0, 5, transport::Bytes{1, 2});
  ASSERT_TRUE(s2.ok());
  transport::Bytes got;
  auto r2 = ts[0]->PostRecv(2, 5);
  ASSERT_TRUE(r2.ok());
  EXPECT_TRUE(ts[0]->Wait(*r2, transport::DeadlineIn(milliseconds(1000)), &got).ok());
  EXPECT_EQ(got, (transport::Bytes{1, 2}));
}

TEST(LoopbackTest, MessageSentBeforeDeathIsDelivered) {
  auto ts = transport::CreateLoopbackTransports(2);
  ASSERT_TRUE(ts[1]->PostSend(0, 1, transport::Bytes{9}).ok());
  transport::KillLoopbackRank(*ts[0], 1);
  auto r = ts[0]->PostRecv(1, 1);
  ASSERT_TRUE(r.ok());
  transport::Bytes got;
  EXPECT_TRUE(ts[0]->Wait(*r, transport::DeadlineIn(milliseconds(1000)), &got).ok());
  EXPECT_EQ(got, transport::Bytes{9});
}

TEST(LoopbackTest, PendingReceiveOnDeadRankFails) {
  auto ts = transport::CreateLoopbackTransports(2);
  auto r = ts[1]->PostRecv(0, 1);
  ASSERT_TRUE(r.ok());
  transport::KillLoopbackRank(*ts[0], 1);
  EXPECT_TRUE(
      absl::IsUnavailable(ts[1]->Wait(*r, transport::DeadlineIn(milliseconds(1000)), nullptr)));
}

}  // namespace
}  // namespace gradex
