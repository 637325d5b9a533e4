// B-SAG's k' step controller on the data plane: the catalog's
// KPrimeController (catalog/models.h, SparDL Algorithm 2), re-initialised when
// the block's keep count or the team count changes.
#ifndef GRADEX_COLLECTIVES_ALGORITHMS_BSAG_CONTROLLER_H_
#define GRADEX_COLLECTIVES_ALGORITHMS_BSAG_CONTROLLER_H_

#include <cstddef>
#include <cstdint>

#include "catalog/models.h"

namespace gradex::collectives::algorithms {

class BsagController {
 public:
  // Re-initialises when the block's keep count or the team count changes.
  size_t KPrime(size_t k_block, int teams) {
    if (teams_ != teams || c_.k_block() != k_block) {
      c_ = catalog::KPrimeController(k_block, teams);
      teams_ = teams;
    }
    return static_cast<size_t>(c_.kprime());
  }
  // Feeds the post-gather count u of the call that used KPrime().
  void Update(size_t post_gather_count) { c_.Update(post_gather_count); }

  int64_t step() const { return c_.step(); }

 private:
  catalog::KPrimeController c_;
  int teams_ = 0;
};

}  // namespace gradex::collectives::algorithms

#endif  // GRADEX_COLLECTIVES_ALGORITHMS_BSAG_CONTROLLER_H_
