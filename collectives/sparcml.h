// SparCML's sparse allreduces (SC'19) and Ok-Topk's TopkDSA, on sparse
// streams (collectives/sparse_stream.h). Every rank sends its local top-k
// (k = KeepCount(density, n)); nothing is re-selected afterwards, so the
// result is the exact sum of the P selections (at most min(P·k, n) non-zeros)
// and what a rank did not select stays in its residual.
#ifndef GRADEX_COLLECTIVES_SPARCML_H_
#define GRADEX_COLLECTIVES_SPARCML_H_

#include <memory>

#include "collectives/sparse_allreduce.h"

namespace gradex {

std::unique_ptr<SparseAllreduce> CreateSparcmlSsarRd();
std::unique_ptr<SparseAllreduce> CreateSparcmlSsarSplit();
std::unique_ptr<SparseAllreduce> CreateSparcmlDsarSplit();
std::unique_ptr<SparseAllreduce> CreateTopkDsa();

}  // namespace gradex

#endif  // GRADEX_COLLECTIVES_SPARCML_H_
