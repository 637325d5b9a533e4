// The Table 1 rows (the Ok-Topk paper's Table 1; SparDL's own rows as
// reconstructed in docs/design.md and docs/architecture.md), one function per row,
// referenced by the catalog entries (catalog/algorithms.cc).
#ifndef GRADEX_CATALOG_TABLE1_H_
#define GRADEX_CATALOG_TABLE1_H_

#include "catalog/catalog.h"

namespace gradex::catalog::table1 {

CostRange DenseRing(const CostInputs& in);
CostRange DenseRabenseifner(const CostInputs& in);
CostRange AllGatherTopk(const CostInputs& in);
CostRange GaussianThreshold(const CostInputs& in);
CostRange DynamicSparseSplit(const CostInputs& in);  // TopkDSA
CostRange GlobalTopkTree(const CostInputs& in);
CostRange OkTopk(const CostInputs& in);
CostRange SsarRecursiveDoubling(const CostInputs& in);
CostRange SsarSplit(const CostInputs& in);
CostRange DsarSplit(const CostInputs& in);
CostRange SparDL(const CostInputs& in);
CostRange Rsag(const CostInputs& in);
// With in.kprime_ratio > 0 the row is exact at k' = ratio · k_block (the
// ratio clamped to [1/T, 1], its possible range); else the range.
CostRange Bsag(const CostInputs& in);
// COVAP: from the mean over I steps (a dense ring of 1/I of the bucket) to
// a call that sends its whole bucket (a dense ring of n).
CostRange Covap(const CostInputs& in);

}  // namespace gradex::catalog::table1

#endif  // GRADEX_CATALOG_TABLE1_H_
