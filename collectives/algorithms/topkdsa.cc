// topkdsa: the TopkDSA of Ok-Topk's comparison (Table 1): SparCML's dynamic
// sparse allreduce with a local top-k selection. A sparse reduce-scatter
// whose reduced slices switch to dense when they pass δ, then an all-gather
// carrying each slice in its own form: 4k(P-1)/P words when the selections
// overlap fully, up to (2k + n)(P-1)/P when the slices are dense. It differs
// from sparcml-dsar-split only there: dsar-split always gathers dense.
#include "collectives/algorithms/sparcml_split.h"

namespace gradex::collectives::algorithms {
namespace {

class TopkDsa final : public SparcmlSplit {
 public:
  std::string_view name() const override { return "topkdsa"; }

 protected:
  wire::StreamPolicy policy() const override { return wire::StreamPolicy::kDynamic; }
  GatherForm gather_form() const override { return GatherForm::kPerSlice; }
};

}  // namespace

GRADEX_REGISTER_ALGORITHM("topkdsa", [] { return std::make_unique<TopkDsa>(); });

}  // namespace gradex::collectives::algorithms
