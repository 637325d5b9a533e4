// The in-band agreement (epoch entry and plan barriers) under a hostile peer:
// its receives are posted for at most what an agreement message can hold, so
// a peer announcing more is refused, named and counted instead of being
// allocated; honest peers agree as before.
#include "member/epoch_sync.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collectives/tag_space.h"
#include "transport/loopback_transport.h"

namespace gradex {
namespace {

constexpr uint32_t kEpoch = 7;
constexpr uint64_t kSequence = 64;

member::SyncState State(uint64_t next_step) {
  member::SyncState s;
  s.next_step = next_step;
  s.newest_epoch = kEpoch;
  s.values = member::BarrierValues::From(member::Plan{}, {});  // a plan's defaults: valid values
  return s;
}

TEST(EpochSync, HonestPeersAgree) {
  std::vector<std::unique_ptr<transport::Transport>> ts = transport::CreateLoopbackTransports(3);
  std::vector<absl::StatusOr<member::SyncState>> out(3, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      out[r] = member::AgreeInBand(*ts[r], kEpoch, kSequence, State(10 + r),
                                   transport::DeadlineIn(std::chrono::seconds(10)));
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(out[r].ok()) << out[r].status();
    EXPECT_EQ(out[r]->next_step, 12u);  // the maximum
    EXPECT_EQ(ts[r]->TotalCounters().refused_messages, 0u);
  }
}

TEST(EpochSync, AnOversizedAgreementMessageIsRefusedNamingThePeer) {
  std::vector<std::unique_ptr<transport::Transport>> ts = transport::CreateLoopbackTransports(2);
  // Rank 1 plays a hostile member: 1 MiB where its agreement message goes.
  constexpr size_t kHuge = size_t{1} << 20;
  const uint64_t tag = collectives::MessageTag(member::kSyncPhase, kSequence, 0);
  absl::StatusOr<transport::RequestId> sent =
      ts[1]->PostSend(0, tag, transport::Bytes(kHuge, 0x5a));
  ASSERT_TRUE(sent.ok()) << sent.status();
  absl::StatusOr<member::SyncState> got = member::AgreeInBand(
      *ts[0], kEpoch, kSequence, State(10), transport::DeadlineIn(std::chrono::seconds(5)));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), absl::StrCat("peer 1 sent ", kHuge)))
      << got.status();
  EXPECT_EQ(ts[0]->counters(1).refused_messages, 1u);
  EXPECT_EQ(ts[0]->counters(1).recv_bytes, 0u);
}

}  // namespace
}  // namespace gradex
