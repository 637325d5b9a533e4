#include "collectives/bsag_controller.h"

#include <algorithm>

namespace gradex {

size_t BsagController::KPrime(size_t k_block, int teams) {
  if (k_block != k_block_ || teams != teams_) {
    k_block_ = k_block;
    teams_ = teams;
    floor_ = static_cast<int64_t>((k_block + teams - 1) / teams);
    kprime_ = floor_;
    step_ = std::max<int64_t>(1, (static_cast<int64_t>(k_block) - kprime_) / 100);
    right_in_a_row_ = 0;
  }
  return static_cast<size_t>(kprime_);
}

void BsagController::Update(size_t post_gather_count) {
  if (teams_ == 0) return;
  const bool too_many = post_gather_count > k_block_;
  const bool right = too_many == (step_ < 0);
  if (right) {
    if (++right_in_a_row_ >= 2) {
      step_ *= 2;
      right_in_a_row_ = 0;
    }
  } else {
    right_in_a_row_ = 0;
    step_ = (step_ == 1 || step_ == -1) ? -step_ : -step_ / 2;
  }
  const int64_t hi = static_cast<int64_t>(k_block_);
  // Bound the step too, so that a long run against a clamp cannot grow it
  // without limit.
  step_ = std::clamp<int64_t>(step_, -std::max<int64_t>(1, hi), std::max<int64_t>(1, hi));
  kprime_ = std::clamp<int64_t>(kprime_ + step_, floor_, std::max(floor_, hi));
}

}  // namespace gradex
