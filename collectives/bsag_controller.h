// B-SAG's k' step controller (SparDL Algorithm 2, as the authors' code runs
// it): k' starts at k_block/T with a step of (k_block - k')/100; after each
// call, with u the post-gather count, a step whose sign matches the wanted
// direction (shrink when u > k_block, grow otherwise) is right; two right moves
// in a row double the step, a wrong one reverses it and halves it (or only
// reverses it at +-1). k' stays within [k_block/T, k_block].
#ifndef GRADEX_COLLECTIVES_BSAG_CONTROLLER_H_
#define GRADEX_COLLECTIVES_BSAG_CONTROLLER_H_

#include <cstddef>
#include <cstdint>

namespace gradex {

class BsagController {
 public:
  // Re-initialises when the block's keep count or the team count changes.
  size_t KPrime(size_t k_block, int teams);
  // Feeds the post-gather count u of the call that used KPrime().
  void Update(size_t post_gather_count);

  int64_t step() const { return step_; }

 private:
  size_t k_block_ = 0;
  int teams_ = 0;
  int64_t kprime_ = 0;
  int64_t floor_ = 0;
  int64_t step_ = 0;
  int right_in_a_row_ = 0;
};

}  // namespace gradex

#endif  // GRADEX_COLLECTIVES_BSAG_CONTROLLER_H_
