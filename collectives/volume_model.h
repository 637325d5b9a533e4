// The α-β volume model of the SparDL family (SparDL eqs. (1)-(7) made exact
// for our block sizes): bytes one rank sends and receives in one call when
// every selected block is full (carries its keep count of nonzeros), frame
// headers included. Tests hold measured bytes against it (invariant 4).
#ifndef GRADEX_COLLECTIVES_VOLUME_MODEL_H_
#define GRADEX_COLLECTIVES_VOLUME_MODEL_H_

#include "collectives/block_layout.h"
#include "collectives/sparse_allreduce.h"

namespace gradex::collectives {

// Spar-Reduce-Scatter then Bruck all-gather inside a group of layout.parts()
// members, as member `me`.
Volume SrsAndBruckVolume(const BlockLayout& layout, int me);

}  // namespace gradex::collectives

#endif  // GRADEX_COLLECTIVES_VOLUME_MODEL_H_
