// Adds the wall time of a scope to one of the call's phases.
#ifndef GRADEX_COLLECTIVES_PHASE_TIMER_H_
#define GRADEX_COLLECTIVES_PHASE_TIMER_H_

#include <chrono>

namespace gradex::collectives {

class PhaseTimer {
 public:
  explicit PhaseTimer(double* into) : into_(into), start_(std::chrono::steady_clock::now()) {}
  ~PhaseTimer() {
    *into_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  double* into_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace gradex::collectives

#endif  // GRADEX_COLLECTIVES_PHASE_TIMER_H_
