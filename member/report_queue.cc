#include "member/report_queue.h"

#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gradex::member {

bool ReportQueue::Push(StepReport report) {
  bool ok;
  {
    // Held only for a deque operation by either side (the sender never
    // holds it across the network), so this never waits long.
    absl::MutexLock lock(&mu_);
    ok = !closed_ && q_.size() < capacity_;
    if (ok) q_.push_back(std::move(report));
  }
  if (!ok) drops_.fetch_add(1, std::memory_order_relaxed);
  return ok;
}

std::optional<StepReport> ReportQueue::Pop(transport::Deadline deadline) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return closed_ || !q_.empty(); };
  const auto left = deadline - transport::Clock::now();
  mu_.AwaitWithTimeout(absl::Condition(&ready),
                       absl::FromChrono(std::chrono::duration_cast<std::chrono::nanoseconds>(
                           left.count() > 0 ? left : transport::Clock::duration::zero())));
  if (q_.empty()) return std::nullopt;
  StepReport r = std::move(q_.front());
  q_.pop_front();
  return r;
}

void ReportQueue::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

size_t ReportQueue::size() const {
  absl::MutexLock lock(&mu_);
  return q_.size();
}

}  // namespace gradex::member
