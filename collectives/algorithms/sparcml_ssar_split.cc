// sparcml-ssar-split: SparCML's static sparse allreduce, split allgather
// variant (for large data). The result is known to stay sparse, so streams
// never switch: the split reduce-scatter and the Bruck all-gather carry
// sparse frames only (P·k of the result at most), and QSGD, which applies to
// dense phases, never does.
#include "collectives/algorithms/sparcml_split.h"

namespace gradex::collectives::algorithms {
namespace {

class SparcmlSsarSplit final : public SparcmlSplit {
 public:
  std::string_view name() const override { return "sparcml-ssar-split"; }

 protected:
  wire::StreamPolicy policy() const override { return wire::StreamPolicy::kStatic; }
  GatherForm gather_form() const override { return GatherForm::kStatic; }
};

}  // namespace

GRADEX_REGISTER_ALGORITHM("sparcml-ssar-split",
                          [] { return std::make_unique<SparcmlSsarSplit>(); });

}  // namespace gradex::collectives::algorithms
