#ifndef GRADEX_COLLECTIVES_DENSE_RING_H_
#define GRADEX_COLLECTIVES_DENSE_RING_H_

#include <memory>

#include "collectives/sparse_allreduce.h"

namespace gradex {

std::unique_ptr<SparseAllreduce> CreateDenseRing();

}  // namespace gradex

#endif  // GRADEX_COLLECTIVES_DENSE_RING_H_
