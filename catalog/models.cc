#include "catalog/models.h"

#include <algorithm>

namespace gradex::catalog {

KPrimeController::KPrimeController(uint64_t k_block, int teams)
    : k_block_(static_cast<int64_t>(k_block)), teams_(std::max(teams, 1)) {
  floor_ = (k_block_ + teams_ - 1) / teams_;
  kprime_ = floor_;
  step_ = std::max<int64_t>(1, (k_block_ - kprime_) / 100);
}

void KPrimeController::Update(uint64_t u) {
  if (teams_ == 0) return;
  const bool too_many = static_cast<int64_t>(u) > k_block_;
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
  // Bound the step too, so that a long run against a clamp cannot grow it
  // without limit.
  const int64_t bound = std::max<int64_t>(1, k_block_);
  step_ = std::clamp<int64_t>(step_, -bound, bound);
  kprime_ = std::clamp<int64_t>(kprime_ + step_, floor_, std::max(floor_, k_block_));
}

}  // namespace gradex::catalog
