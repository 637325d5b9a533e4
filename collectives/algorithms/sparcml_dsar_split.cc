// sparcml-dsar-split: SparCML's dynamic sparse allreduce, split allgather
// variant (for results that densify). The owner's sum of its slice is a
// dynamic stream that switches to dense when its entries pass δ; the second
// phase is a dense all-gather of every slice (the phase QSGD quantizes, with
// --quantize-bits), and the result is returned dense.
#include "collectives/algorithms/sparcml_split.h"

namespace gradex::collectives::algorithms {
namespace {

class SparcmlDsarSplit final : public SparcmlSplit {
 public:
  std::string_view name() const override { return "sparcml-dsar-split"; }

 protected:
  wire::StreamPolicy policy() const override { return wire::StreamPolicy::kDynamic; }
  GatherForm gather_form() const override { return GatherForm::kDense; }
};

}  // namespace

GRADEX_REGISTER_ALGORITHM("sparcml-dsar-split",
                          [] { return std::make_unique<SparcmlDsarSplit>(); });

}  // namespace gradex::collectives::algorithms
