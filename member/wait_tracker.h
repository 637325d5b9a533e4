// Where the data plane waits, for hang diagnosis. A WaitTracker lives as long
// as the agent; each epoch's communicator is wrapped (Wrap) in a Transport
// decorator that records every posted receive (peer, post time) until it
// completes through Wait or Test, fails, or is cancelled. The heartbeat thread
// reads the oldest pending receive (OldestWait) under a short mutex, so it
// never waits on the data plane, and the data plane pays one lock and a scan
// of a handful of entries per receive (no allocation once the vector grew).
#ifndef GRADEX_MEMBER_WAIT_TRACKER_H_
#define GRADEX_MEMBER_WAIT_TRACKER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "member/control_plane.h"
#include "transport/transport.h"

namespace gradex::member {

class WaitTracker final : public WaitSource, public std::enable_shared_from_this<WaitTracker> {
 public:
  // The agent says which step its calls belong to; receives posted outside
  // a step (none today) are still tracked under the last step set.
  void SetStep(uint32_t epoch, uint64_t step);
  // Wraps `inner` (the communicator of one epoch). Only one wrapped transport
  // is expected at a time; an older one's entries are dropped on destruction.
  std::unique_ptr<transport::Transport> Wrap(std::unique_ptr<transport::Transport> inner);
  // The transport under a wrapper (tests reach the loopback fabric through
  // it), or `t` itself when it is not one.
  static transport::Transport* Inner(transport::Transport* t);

  // The wire-up of the epoch being entered (ConnectHooks::waiting): it
  // waits on `peer` while `waiting`. Tracked as receives are, under the
  // epoch and step last set, so that a member stalling the wire-up shows in
  // its peers' heartbeats; ClearWireUp when the connect
  // returns.
  void WireUpWaiting(int peer, bool waiting);
  void ClearWireUp() { Clear(kWireUpOwner); }

  std::optional<WaitInfo> OldestWait(std::chrono::milliseconds at_least) const override;
  uint32_t running_epoch() const override { return epoch_.load(std::memory_order_relaxed); }

  // An eviction preempts the step in progress: while a
  // Wait is blocked, `check` is polled (every kPreemptPoll); when it returns
  // a reason, the Wait ends ABORTED with it, so the survivors enter the new
  // epoch at once instead of at the step deadline. Empty: never.
  using Preemption = std::function<std::optional<std::string>()>;
  void SetPreemption(Preemption check);
  static constexpr std::chrono::milliseconds kPreemptPoll{50};

  // The last receive whose Wait ran past its deadline since `since` (the
  // agent names that peer in its step error), or nothing.
  std::optional<WaitInfo> LastTimeout(transport::Clock::time_point since) const;

 private:
  friend class WaitTrackingTransport;
  struct Pending {
    uint64_t owner = 0;  // which wrapper posted it
    transport::RequestId id = 0;
    int peer = 0;
    transport::Clock::time_point posted;
  };
  static constexpr uint64_t kWireUpOwner = 0;  // wrappers are numbered from 1
  uint64_t NewOwner();
  void Posted(uint64_t owner, transport::RequestId id, int peer);
  // Drops the entry (completed, failed or released); no-op for sends.
  void Done(uint64_t owner, transport::RequestId id);
  void TimedOut(uint64_t owner, transport::RequestId id);
  void Clear(uint64_t owner);

  std::optional<std::string> Preempted() const;

  std::atomic<uint32_t> epoch_{0};
  Preemption preempt_;  // guarded by mu_
  mutable std::mutex mu_;
  uint64_t step_ = 0;  // guarded by mu_
  uint64_t owners_ = 0;
  std::vector<Pending> pending_;
  std::optional<WaitInfo> last_timeout_;
  transport::Clock::time_point last_timeout_at_;
};

}  // namespace gradex::member

#endif  // GRADEX_MEMBER_WAIT_TRACKER_H_
