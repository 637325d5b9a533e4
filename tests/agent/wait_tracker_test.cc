// The wait tracker on the loopback transport: a receive whose sender is late
// shows up with the right peer and a growing wait; receives completed by Wait
// or Test, cancelled or timed out disappear; the wrapper forwards everything.
#include "member/wait_tracker.h"

#include <gtest/gtest.h>

#include <thread>

#include "transport/loopback_transport.h"

namespace gradex {
namespace {

using std::chrono::milliseconds;

TEST(WaitTracker, LateSenderShowsUpAndCompletedReceivesDisappear) {
  auto fabric = transport::CreateLoopbackTransports(3);
  auto tracker = std::make_shared<member::WaitTracker>();
  std::unique_ptr<transport::Transport> t = tracker->Wrap(std::move(fabric[0]));
  EXPECT_EQ(member::WaitTracker::Inner(t.get())->rank(), 0);
  EXPECT_EQ(t->size(), 3);
  tracker->SetStep(7, 42);
  EXPECT_EQ(tracker->running_epoch(), 7u);
  EXPECT_FALSE(tracker->OldestWait(milliseconds(0)));

  absl::StatusOr<transport::RequestId> from2 = t->PostRecv(2, 5);
  ASSERT_TRUE(from2.ok());
  std::this_thread::sleep_for(milliseconds(30));
  absl::StatusOr<transport::RequestId> from1 = t->PostRecv(1, 5);
  ASSERT_TRUE(from1.ok());

  std::optional<member::WaitInfo> w = tracker->OldestWait(milliseconds(20));
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->peer, 2);  // the oldest, not the newest
  EXPECT_EQ(w->epoch, 7u);
  EXPECT_EQ(w->step, 42u);
  EXPECT_GE(w->waited.count(), 20);
  EXPECT_FALSE(tracker->OldestWait(milliseconds(5000)));  // not that old yet
  std::this_thread::sleep_for(milliseconds(30));
  std::optional<member::WaitInfo> later = tracker->OldestWait(milliseconds(0));
  ASSERT_TRUE(later.has_value());
  EXPECT_GE(later->waited.count(), w->waited.count() + 20);  // grows while it waits

  // Rank 2 sends: the receive completes through Wait and leaves; rank 1's
  // is now the oldest.
  ASSERT_TRUE(fabric[2]->PostSend(0, 5, transport::Bytes{1, 2, 3}).ok());
  transport::Bytes in;
  ASSERT_TRUE(t->Wait(*from2, transport::DeadlineIn(milliseconds(2000)), &in).ok());
  EXPECT_EQ(in, (transport::Bytes{1, 2, 3}));
  w = tracker->OldestWait(milliseconds(0));
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->peer, 1);

  // Completed through Test: nothing left.
  ASSERT_TRUE(fabric[1]->PostSend(0, 5, transport::Bytes{9}).ok());
  bool done = false;
  for (int i = 0; i < 2000 && !done; ++i) {
    absl::StatusOr<bool> r = t->Test(*from1, &in);
    ASSERT_TRUE(r.ok()) << r.status();
    done = *r;
    if (!done) std::this_thread::sleep_for(milliseconds(1));
  }
  ASSERT_TRUE(done);
  EXPECT_FALSE(tracker->OldestWait(milliseconds(0)));
}

TEST(WaitTracker, TimeoutNamesThePeerAndCancelClears) {
  auto fabric = transport::CreateLoopbackTransports(2);
  auto tracker = std::make_shared<member::WaitTracker>();
  std::unique_ptr<transport::Transport> t = tracker->Wrap(std::move(fabric[0]));
  tracker->SetStep(3, 9);
  const transport::Clock::time_point start = transport::Clock::now();
  EXPECT_FALSE(tracker->LastTimeout(start));
  absl::StatusOr<transport::RequestId> id = t->PostRecv(1, 77);
  ASSERT_TRUE(id.ok());
  absl::Status s = t->Wait(*id, transport::DeadlineIn(milliseconds(50)), nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  std::optional<member::WaitInfo> to = tracker->LastTimeout(start);
  ASSERT_TRUE(to.has_value());
  EXPECT_EQ(to->peer, 1);
  EXPECT_EQ(to->step, 9u);
  EXPECT_GE(to->waited.count(), 45);
  EXPECT_FALSE(
      tracker->LastTimeout(transport::Clock::now() + milliseconds(1)));  // an older timeout
  // Still posted after a deadline (the caller may wait again) until cancelled.
  EXPECT_TRUE(tracker->OldestWait(milliseconds(0)).has_value());
  t->CancelAll(transport::DeadlineIn(milliseconds(100)));
  EXPECT_FALSE(tracker->OldestWait(milliseconds(0)));
}

TEST(WaitTracker, AnOldCommunicatorsEntriesLeaveWithIt) {
  auto tracker = std::make_shared<member::WaitTracker>();
  auto fabric_a = transport::CreateLoopbackTransports(2);
  auto fabric_b = transport::CreateLoopbackTransports(2);
  std::unique_ptr<transport::Transport> a = tracker->Wrap(std::move(fabric_a[0]));
  std::unique_ptr<transport::Transport> b = tracker->Wrap(std::move(fabric_b[0]));
  ASSERT_TRUE(a->PostRecv(1, 1).ok());
  ASSERT_TRUE(b->PostRecv(1, 2).ok());
  a->Abort(transport::DeadlineIn(milliseconds(100)));
  EXPECT_TRUE(a->aborted());
  ASSERT_TRUE(tracker->OldestWait(milliseconds(0)).has_value());  // b's is still pending
  b.reset();
  EXPECT_FALSE(tracker->OldestWait(milliseconds(0)));
}

// The wire-up of an epoch being entered reports its pending peers
// (ConnectHooks::waiting): they are waits like a step's receives, under the
// epoch being entered, so a member that never connects shows in its peers'
// heartbeats; a peer that answered, or the end of the
// connect, removes them, and a communicator's own receives are kept apart.
TEST(WaitTracker, WireUpWaitsShowUntilThePeerAnswersOrTheConnectEnds) {
  auto tracker = std::make_shared<member::WaitTracker>();
  tracker->SetStep(4, 64);
  tracker->WireUpWaiting(3, true);
  std::this_thread::sleep_for(milliseconds(30));
  tracker->WireUpWaiting(1, true);
  std::optional<member::WaitInfo> w = tracker->OldestWait(milliseconds(20));
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->peer, 3);
  EXPECT_EQ(w->epoch, 4u);
  EXPECT_EQ(w->step, 64u);
  EXPECT_GE(w->waited.count(), 20);
  tracker->WireUpWaiting(3, false);  // rank 3 answered
  w = tracker->OldestWait(milliseconds(0));
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->peer, 1);
  // A communicator's receive with the same id as a wire-up entry is another
  // wait: clearing the wire-up leaves it.
  auto fabric = transport::CreateLoopbackTransports(2);
  std::unique_ptr<transport::Transport> t = tracker->Wrap(std::move(fabric[0]));
  ASSERT_TRUE(t->PostRecv(1, 9).ok());
  tracker->ClearWireUp();
  w = tracker->OldestWait(milliseconds(0));
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->peer, 1);
  t.reset();
  EXPECT_FALSE(tracker->OldestWait(milliseconds(0)));
  tracker->WireUpWaiting(-1, true);  // no peer: ignored
  EXPECT_FALSE(tracker->OldestWait(milliseconds(0)));
}

}  // namespace
}  // namespace gradex
