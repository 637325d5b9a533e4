// spardl: Spar-Reduce-Scatter over all P ranks, Bruck all-gather, global
// residual collection (SparDL without teams).
#include "collectives/spardl.h"

namespace gradex {
namespace {

class SparDL final : public SparDLFamily {
 public:
  std::string_view name() const override { return "spardl"; }
  AlgorithmTraits traits() const override { return {}; }

 protected:
  AlgorithmId id() const override { return AlgorithmId::kSparDL; }
  // Teams belong to the SAG variants; plain SparDL is one team of P.
  absl::StatusOr<int> Teams(const AllreduceOptions&, int) const override { return 1; }
  absl::Status SyncTeams(Link&, const Group&, const ExpectedBlock&, const AllreduceOptions&,
                         ResidualLedger&, CallStats*, kernels::SparseVec*) override {
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<SparseAllreduce> CreateSparDL() { return std::make_unique<SparDL>(); }

}  // namespace gradex
