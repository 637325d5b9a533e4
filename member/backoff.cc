#include "member/backoff.h"

#include <algorithm>
#include <cmath>

namespace gradex::member {

Backoff::Backoff(BackoffOptions options, uint64_t seed) : options_(options), rng_(seed) {
  options_.initial = std::max(options_.initial, std::chrono::milliseconds(1));
  options_.max = std::max(options_.max, options_.initial);
  options_.multiplier = std::max(options_.multiplier, 1.0);
  options_.jitter = std::clamp(options_.jitter, 0.0, 1.0);
}

std::chrono::milliseconds Backoff::Next() {
  const double cap = static_cast<double>(options_.max.count());
  // Grows in floating point so a long outage cannot overflow the exponent.
  const double base =
      std::min(cap, static_cast<double>(options_.initial.count()) *
                        std::pow(options_.multiplier, static_cast<double>(std::min(n_, 64))));
  ++n_;
  std::uniform_real_distribution<double> u(1.0 - options_.jitter, 1.0 + options_.jitter);
  const double d = std::clamp(base * u(rng_), 1.0, cap);
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(d)));
}

bool IsTransientJoinError(absl::StatusCode code) {
  // ALREADY_EXISTS: a previous process of this agent still holds the agent
  // id until its lease lapses (a restart faster than the lease).
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded ||
         code == absl::StatusCode::kAlreadyExists;
}

}  // namespace gradex::member
