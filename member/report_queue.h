// A bounded queue of step reports between the step loop and the sender
// thread: Push never blocks (a full queue drops the report and counts it),
// Pop waits up to a deadline for the sender.
#ifndef GRADEX_MEMBER_REPORT_QUEUE_H_
#define GRADEX_MEMBER_REPORT_QUEUE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "member/control_plane.h"

namespace gradex::member {

class ReportQueue {
 public:
  explicit ReportQueue(size_t capacity) : capacity_(capacity) {}

  // False (and a drop counted) when full or closed.
  bool Push(StepReport report);
  // The oldest report, or nullopt at the deadline or once closed and empty.
  std::optional<StepReport> Pop(transport::Deadline deadline);
  // Wakes Pop; later pushes are dropped.
  void Close();

  uint64_t drops() const { return drops_.load(std::memory_order_relaxed); }
  size_t size() const;

 private:
  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::deque<StepReport> q_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> drops_{0};
};

}  // namespace gradex::member

#endif  // GRADEX_MEMBER_REPORT_QUEUE_H_
