// Hangs name their cause: given each rank's progress (the step it runs
// next), a step that the furthest rank finished but others have not, a step
// deadline later, is a stall naming those ranks. Each stalled step is
// reported once.
#ifndef GRADEX_SERVICES_COORDINATOR_HANGS_STALL_DETECTOR_H_
#define GRADEX_SERVICES_COORDINATOR_HANGS_STALL_DETECTOR_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/time/time.h"

namespace gradex::coordinator::hangs {

struct Stall {
  uint64_t step = 0;                 // the step the laggards have not finished
  uint64_t frontier = 0;             // the step the furthest rank runs next
  std::vector<int> ranks;            // ranks behind the frontier
  std::vector<uint64_t> next_steps;  // their progress, parallel to ranks
  bool diagnosed = false;            // the step was already counted from waits
};

class StallDetector {
 public:
  explicit StallDetector(absl::Duration deadline) : deadline_(deadline) {}
  // next_step[r]: the step rank r runs next. Returns a stall the first time
  // the current frontier has been ahead of some rank for longer than the
  // deadline; `behind` is set to the number of lagging ranks at every check.
  std::optional<Stall> Check(const std::vector<uint64_t>& next_step, absl::Time now, int* behind);
  // Waits (the agents' heartbeats): `oldest` is the longest live wait of the
  // running epoch's ranks, in `step`. True once per step when it passes half
  // the deadline, or the frontier has not moved for the deadline (call after
  // Check): the waiters give up at their deadline, and the wait-for graph
  // goes with them, so waiting for the whole deadline would miss it. Never
  // while ranks are behind the frontier: that stall is the laggard rule's.
  bool CheckWaits(uint64_t step, absl::Duration oldest, absl::Time now);
  void Reset() { frontier_ = 0, since_ = absl::InfinitePast(), reported_ = false; }

 private:
  absl::Duration deadline_;
  uint64_t frontier_ = 0;
  absl::Time since_ = absl::InfinitePast();
  bool reported_ = false;  // a stall was reported at this frontier
  bool laggards_ = false;  // ranks were behind the frontier at the last Check
  // The last step diagnosed from waits (kept across epochs: steps only go
  // forward), so a laggard stall of the same step is not counted twice.
  uint64_t waits_step_ = ~uint64_t{0};
};

}  // namespace gradex::coordinator::hangs

#endif  // GRADEX_SERVICES_COORDINATOR_HANGS_STALL_DETECTOR_H_
