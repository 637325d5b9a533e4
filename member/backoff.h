// Capped exponential backoff with jitter, shared by the control plane's
// retries (the first join, the watcher's and the sender's re-joins). Jitter
// keeps the agents of a job from retrying in lockstep against a coordinator
// that has just come back.
#ifndef GRADEX_MEMBER_BACKOFF_H_
#define GRADEX_MEMBER_BACKOFF_H_

#include <chrono>
#include <cstdint>
#include <random>

#include "absl/status/status.h"

namespace gradex::member {

struct BackoffOptions {
  std::chrono::milliseconds initial{100};
  std::chrono::milliseconds max{2000};
  double multiplier = 2.0;
  double jitter = 0.2;  // each delay is the base times a uniform factor in [1-j, 1+j]
};

// Not thread-safe: one per retrying thread.
class Backoff {
 public:
  explicit Backoff(BackoffOptions options = {}, uint64_t seed = std::random_device{}());

  // The delay before the next attempt: initial · multiplier^n (n = delays
  // given since the last Reset), capped at max, jittered, never above max.
  std::chrono::milliseconds Next();
  // After a success: the next delay is `initial` again.
  void Reset() { n_ = 0; }
  int delays() const { return n_; }

 private:
  BackoffOptions options_;
  std::mt19937_64 rng_;
  int n_ = 0;
};

// A join error that a coordinator coming (back) up, or a lapsing lease,
// would fix: retry it (ALREADY_EXISTS: the agent id's previous membership,
// e.g. this agent's process before a restart, is still live).
// Everything else (UNAUTHENTICATED, INVALID_ARGUMENT, FAILED_PRECONDITION,
// RESOURCE_EXHAUSTED, ...) is the coordinator's answer and is final.
bool IsTransientJoinError(absl::StatusCode code);

}  // namespace gradex::member

#endif  // GRADEX_MEMBER_BACKOFF_H_
