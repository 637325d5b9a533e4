// spardl: Spar-Reduce-Scatter over all P ranks, Bruck all-gather, global
// residual collection (SparDL without teams).

#include "collectives/algorithms/spardl_family.h"

namespace gradex::collectives::algorithms {
namespace {

class SparDL final : public SparDLFamily {
 public:
  std::string_view name() const override { return "spardl"; }

 protected:
  // Teams belong to the SAG variants; plain SparDL is one team of P.
  absl::StatusOr<int> Teams(const AllreduceOptions&, int) const override { return 1; }
  absl::Status SyncTeams(Link&, const Group&, const wire::ExpectedBlock&, const AllreduceOptions&,
                         ResidualLedger&, CallStats*, kernels::SparseVec*) override {
    return absl::OkStatus();
  }
  void SyncVolume(int, uint32_t, size_t, size_t, Volume*) const override {}
};

}  // namespace

GRADEX_REGISTER_ALGORITHM("spardl", [] { return std::make_unique<SparDL>(); });

}  // namespace gradex::collectives::algorithms
