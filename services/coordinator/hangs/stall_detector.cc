#include "services/coordinator/hangs/stall_detector.h"

#include <algorithm>

namespace gradex::coordinator::hangs {

std::optional<Stall> StallDetector::Check(const std::vector<uint64_t>& next_step, absl::Time now,
                                          int* behind) {
  *behind = 0;
  if (next_step.empty()) return std::nullopt;
  const uint64_t frontier = *std::max_element(next_step.begin(), next_step.end());
  if (frontier != frontier_ || since_ == absl::InfinitePast()) {
    frontier_ = frontier;
    since_ = now;
    reported_ = false;
  }
  Stall s;
  s.frontier = frontier;
  s.step = frontier;
  for (size_t r = 0; r < next_step.size(); ++r) {
    if (next_step[r] < frontier) {
      s.ranks.push_back(static_cast<int>(r));
      s.next_steps.push_back(next_step[r]);
      s.step = std::min(s.step, next_step[r]);
    }
  }
  laggards_ = !s.ranks.empty();
  if (s.ranks.empty()) return std::nullopt;
  if (now - since_ < deadline_) return std::nullopt;
  *behind = static_cast<int>(s.ranks.size());
  if (reported_) return std::nullopt;
  reported_ = true;
  s.diagnosed = s.step == waits_step_;
  return s;
}

bool StallDetector::CheckWaits(uint64_t step, absl::Duration oldest, absl::Time now) {
  if (step == waits_step_ || laggards_) return false;
  const bool frontier_stuck = since_ != absl::InfinitePast() && now - since_ >= deadline_;
  if (oldest < deadline_ / 2 && !frontier_stuck) return false;
  waits_step_ = step;
  return true;
}

}  // namespace gradex::coordinator::hangs
