// Factories of the peer algorithms gradex is measured against (issue 3):
// dense-rabenseifner, topka, gaussiank, gtopk. One file each.
#ifndef GRADEX_COLLECTIVES_PEER_ALGORITHMS_H_
#define GRADEX_COLLECTIVES_PEER_ALGORITHMS_H_

#include <memory>

#include "collectives/sparse_allreduce.h"

namespace gradex {

std::unique_ptr<SparseAllreduce> CreateDenseRabenseifner();
std::unique_ptr<SparseAllreduce> CreateTopkA();
std::unique_ptr<SparseAllreduce> CreateGaussianK();
std::unique_ptr<SparseAllreduce> CreateGTopk();

}  // namespace gradex

#endif  // GRADEX_COLLECTIVES_PEER_ALGORITHMS_H_
