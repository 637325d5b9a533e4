#include "member/wait_tracker.h"

#include <algorithm>
#include <utility>

#include "transport/forwarding_transport.h"

namespace gradex::member {

// Overrides only the calls that post, complete or drop a receive.
class WaitTrackingTransport final : public transport::ForwardingTransport {
 public:
  WaitTrackingTransport(std::shared_ptr<WaitTracker> tracker,
                        std::unique_ptr<transport::Transport> inner)
      : transport::ForwardingTransport(std::move(inner)),
        tracker_(std::move(tracker)),
        owner_(tracker_->NewOwner()) {}
  ~WaitTrackingTransport() override { tracker_->Clear(owner_); }

  absl::StatusOr<transport::RequestId> PostRecv(int peer, uint64_t tag) override {
    absl::StatusOr<transport::RequestId> id = transport::ForwardingTransport::PostRecv(peer, tag);
    if (id.ok()) tracker_->Posted(owner_, *id, peer);
    return id;
  }
  absl::StatusOr<transport::RequestId> PostRecvAtMost(int peer, uint64_t tag,
                                                      size_t capacity) override {
    absl::StatusOr<transport::RequestId> id =
        transport::ForwardingTransport::PostRecvAtMost(peer, tag, capacity);
    if (id.ok()) tracker_->Posted(owner_, *id, peer);
    return id;
  }
  absl::Status Wait(transport::RequestId request, transport::Deadline deadline,
                    transport::Bytes* out) override {
    absl::Status s;
    // In slices, so that an eviction of a peer preempts the wait.
    for (;;) {
      const transport::Deadline slice =
          std::min(deadline, transport::Clock::now() + WaitTracker::kPreemptPoll);
      s = transport::ForwardingTransport::Wait(request, slice, out);
      if (s.code() != absl::StatusCode::kDeadlineExceeded || slice >= deadline) break;
      if (std::optional<std::string> why = tracker_->Preempted()) {
        tracker_->Done(owner_, request);
        return absl::AbortedError(*why);
      }
    }
    // A deadline leaves the request posted (the caller may wait again or
    // cancel); anything else released it.
    if (s.code() == absl::StatusCode::kDeadlineExceeded) {
      tracker_->TimedOut(owner_, request);
    } else {
      tracker_->Done(owner_, request);
    }
    return s;
  }
  absl::StatusOr<bool> Test(transport::RequestId request, transport::Bytes* out) override {
    absl::StatusOr<bool> done = transport::ForwardingTransport::Test(request, out);
    if (!done.ok() || *done) tracker_->Done(owner_, request);
    return done;
  }
  void CancelAll(transport::Deadline deadline) override {
    transport::ForwardingTransport::CancelAll(deadline);
    tracker_->Clear(owner_);
  }
  void Abort(transport::Deadline deadline) override {
    transport::ForwardingTransport::Abort(deadline);
    tracker_->Clear(owner_);
  }

 private:
  std::shared_ptr<WaitTracker> tracker_;
  const uint64_t owner_;
};

void WaitTracker::SetStep(uint32_t epoch, uint64_t step) {
  epoch_.store(epoch, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  step_ = step;
}

std::unique_ptr<transport::Transport> WaitTracker::Wrap(
    std::unique_ptr<transport::Transport> inner) {
  return std::make_unique<WaitTrackingTransport>(shared_from_this(), std::move(inner));
}

transport::Transport* WaitTracker::Inner(transport::Transport* t) {
  if (auto* w = dynamic_cast<WaitTrackingTransport*>(t)) return &w->inner();
  return t;
}

uint64_t WaitTracker::NewOwner() {
  std::lock_guard<std::mutex> lock(mu_);
  return ++owners_;
}

void WaitTracker::Posted(uint64_t owner, transport::RequestId id, int peer) {
  const transport::Clock::time_point now = transport::Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  pending_.push_back({owner, id, peer, now});
}

void WaitTracker::WireUpWaiting(int peer, bool waiting) {
  if (peer < 0) return;
  if (waiting) {
    Posted(kWireUpOwner, static_cast<transport::RequestId>(peer), peer);
  } else {
    Done(kWireUpOwner, static_cast<transport::RequestId>(peer));
  }
}

void WaitTracker::Done(uint64_t owner, transport::RequestId id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < pending_.size(); ++i) {
    if (pending_[i].id == id && pending_[i].owner == owner) {
      pending_[i] = pending_.back();
      pending_.pop_back();
      return;
    }
  }
}

void WaitTracker::TimedOut(uint64_t owner, transport::RequestId id) {
  const transport::Clock::time_point now = transport::Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  for (const Pending& p : pending_) {
    if (p.id == id && p.owner == owner) {
      last_timeout_ =
          WaitInfo{epoch_.load(std::memory_order_relaxed), step_, p.peer,
                   std::chrono::duration_cast<std::chrono::milliseconds>(now - p.posted)};
      last_timeout_at_ = now;
      return;
    }
  }
}

void WaitTracker::Clear(uint64_t owner) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [owner](const Pending& p) { return p.owner == owner; }),
                 pending_.end());
}

std::optional<WaitInfo> WaitTracker::OldestWait(std::chrono::milliseconds at_least) const {
  const transport::Clock::time_point now = transport::Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  const Pending* oldest = nullptr;
  for (const Pending& p : pending_) {
    if (oldest == nullptr || p.posted < oldest->posted) oldest = &p;
  }
  if (oldest == nullptr || now - oldest->posted < at_least) return std::nullopt;
  return WaitInfo{epoch_.load(std::memory_order_relaxed), step_, oldest->peer,
                  std::chrono::duration_cast<std::chrono::milliseconds>(now - oldest->posted)};
}

std::optional<WaitInfo> WaitTracker::LastTimeout(transport::Clock::time_point since) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!last_timeout_ || last_timeout_at_ < since) return std::nullopt;
  return last_timeout_;
}

void WaitTracker::SetPreemption(Preemption check) {
  std::lock_guard<std::mutex> lock(mu_);
  preempt_ = std::move(check);
}

std::optional<std::string> WaitTracker::Preempted() const {
  Preemption check;
  {
    std::lock_guard<std::mutex> lock(mu_);
    check = preempt_;
  }
  return check ? check() : std::nullopt;
}

}  // namespace gradex::member
