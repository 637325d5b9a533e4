// The standard fold of P ranks onto a power of two (Thakur, Rabenseifner and
// Gropp 2005): with p2 = 2^floor(log2 P) and r = P - p2, the first 2r ranks
// pair up; the even one of each pair hands its data to the odd one and sits
// out, and gets the result back at the end. The p2 remaining ranks are
// renumbered 0..p2-1.
#ifndef GRADEX_COLLECTIVES_ALGORITHMS_POWER_OF_TWO_FOLD_H_
#define GRADEX_COLLECTIVES_ALGORITHMS_POWER_OF_TWO_FOLD_H_

namespace gradex::collectives::algorithms {

struct PowerOfTwoFold {
  PowerOfTwoFold(int rank, int world) {
    p2 = 1;
    while (p2 * 2 <= world) p2 *= 2;
    r = world - p2;
    if (rank < 2 * r) {
      folded_out = rank % 2 == 0;
      partner = folded_out ? rank + 1 : rank - 1;
      active = folded_out ? -1 : rank / 2;
    } else {
      active = rank - r;
    }
  }
  // Global rank of active rank i.
  int Global(int i) const { return i < r ? 2 * i + 1 : i + r; }
  int levels() const {
    int l = 0;
    while ((1 << l) < p2) ++l;
    return l;
  }

  int p2 = 1;
  int r = 0;
  bool folded_out = false;  // even rank of a pair: sends, waits for the result
  int partner = -1;         // the other rank of this rank's pair, if any
  int active = -1;          // rank among the p2 active ones, -1 when folded out
};

}  // namespace gradex::collectives::algorithms

#endif  // GRADEX_COLLECTIVES_ALGORITHMS_POWER_OF_TWO_FOLD_H_
