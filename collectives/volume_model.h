// The α-β volume model of each algorithm (SparDL eqs. (1)-(7) made exact for
// our block sizes): bytes one rank sends and receives in one call when every
// selected block is full (carries its keep count of nonzeros), frame headers
// included. Tests hold measured bytes against it (invariant 4).
#ifndef GRADEX_COLLECTIVES_VOLUME_MODEL_H_
#define GRADEX_COLLECTIVES_VOLUME_MODEL_H_

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "collectives/sparse_allreduce.h"

namespace gradex {

// `kprime` is the B-SAG pre-selection count (per block) the call used.
absl::StatusOr<Volume> ModelVolume(std::string_view algorithm, int rank, int world, size_t n,
                                   const AllreduceOptions& options, size_t kprime = 0);

// The paper's closed form (entries of 8 bytes, no headers, k/P per block):
// spardl 2(P-1)k/P; rsag 2(Q-1)k/Q + log2(T) k/Q; bsag 2(Q-1)k/Q + (T-1) k';
// dense-ring 2(P-1)/P * 4n. Used to show the exact model is the paper's.
double PaperSentBytes(std::string_view algorithm, int world, size_t n,
                      const AllreduceOptions& options, size_t kprime = 0);

}  // namespace gradex

#endif  // GRADEX_COLLECTIVES_VOLUME_MODEL_H_
