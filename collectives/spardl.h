// Factories of the SparDL family (SparDL paper, reconstructed in DESIGN.md).
#ifndef GRADEX_COLLECTIVES_SPARDL_H_
#define GRADEX_COLLECTIVES_SPARDL_H_

#include <memory>

#include "collectives/spardl_family.h"

namespace gradex {

std::unique_ptr<SparseAllreduce> CreateSparDL();
std::unique_ptr<SparseAllreduce> CreateSparDLRsag();
std::unique_ptr<SparseAllreduce> CreateSparDLBsag();

}  // namespace gradex

#endif  // GRADEX_COLLECTIVES_SPARDL_H_
