// The α-β cost rows of the catalog's algorithms (the Ok-Topk paper's Table 1; SparDL's
// own rows as reconstructed in docs/design.md and docs/architecture.md), one function per row,
// referenced by the catalog entries (catalog/algorithms.cc).
#ifndef GRADEX_CATALOG_COST_ROWS_H_
#define GRADEX_CATALOG_COST_ROWS_H_

#include "catalog/catalog.h"

namespace gradex::catalog {

CostRange DenseRingRow(const CostInputs& in);
CostRange DenseRabenseifnerRow(const CostInputs& in);
CostRange AllGatherTopkRow(const CostInputs& in);
CostRange GaussianThresholdRow(const CostInputs& in);
CostRange DynamicSparseSplitRow(const CostInputs& in);  // TopkDSA
CostRange GlobalTopkTreeRow(const CostInputs& in);
CostRange OkTopkRow(const CostInputs& in);
CostRange SsarRecursiveDoublingRow(const CostInputs& in);
CostRange SsarSplitRow(const CostInputs& in);
CostRange DsarSplitRow(const CostInputs& in);
CostRange SparDLRow(const CostInputs& in);
CostRange RsagRow(const CostInputs& in);
// With in.kprime_ratio > 0 the row is exact at k' = ratio · k_block (the
// ratio clamped to [1/T, 1], its possible range); else the range.
CostRange BsagRow(const CostInputs& in);
// COVAP: from the mean over I steps (a dense ring of 1/I of the bucket) to
// a call that sends its whole bucket (a dense ring of n).
CostRange CovapRow(const CostInputs& in);

}  // namespace gradex::catalog

#endif  // GRADEX_CATALOG_COST_ROWS_H_
