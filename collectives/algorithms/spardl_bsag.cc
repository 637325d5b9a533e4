// spardl-bsag: SparDL with B-SAG, for any team count. Each rank pre-selects
// the top k' of its team block, a Bruck all-gather across the teams brings the
// T pieces of the block to every holder, which sum them in team order (the
// same on every holder, so bitwise equal) and keep the top k_block; each of
// the T holders keeps 1/T of what that drops. k' comes from the call's options
// (the coordinator) or from this rank's step controller.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "collectives/algorithms/bsag_controller.h"
#include "collectives/algorithms/spardl_family.h"
#include "collectives/algorithms/sparse_steps.h"
#include "collectives/phase_timer.h"

namespace gradex::collectives::algorithms {
namespace {

class SparDLBsag final : public SparDLFamily {
 public:
  std::string_view name() const override { return "spardl-bsag"; }

 protected:
  // Bruck across the teams sends and receives T-1 pieces of k' entries.
  void SyncVolume(int teams, uint32_t size, size_t, size_t kprime, Volume* v) const override {
    for (int dist = 1; dist < teams; dist <<= 1) {
      const int count = std::min(dist, teams - dist);
      v->sent_bytes += count * wire::FrameBytes(size, kprime);
      v->recv_bytes += count * wire::FrameBytes(size, kprime);
      ++v->messages;
    }
  }

  absl::StatusOr<int> Teams(const AllreduceOptions& options, int world) const override {
    const int t = options.teams;
    if (t < 1 || world % t != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("spardl-bsag needs a team count dividing P=", world, ", got ", t));
    }
    return t;
  }

  absl::Status SyncTeams(Link& link, const Group& cross, const wire::ExpectedBlock& block,
                         const AllreduceOptions& options, ResidualLedger& ledger, CallStats* stats,
                         kernels::SparseVec* owned) override {
    PhaseTimes* times = &stats->phases;
    const int teams = cross.size();
    const size_t k_block = block.capacity;
    // A block kept whole (density 1) gains nothing from pre-selection.
    // "kprime" 0: this rank's controller steers k' (catalog/algorithms.cc).
    const auto asked = static_cast<size_t>(Param(options, "kprime"));
    size_t kprime = k_block >= block.range.size() ? k_block
                    : asked > 0                   ? std::min(asked, k_block)
                                                  : controller_.KPrime(k_block, teams);
    stats->details["kprime_used"] = static_cast<double>(kprime);
    kernels::SparseVec mine, dropped;
    {
      PhaseTimer t(&times->selection_s);
      DropZeros(owned);
      Cut(kernels::View(*owned), kprime, &mine, &dropped);
      ledger.Discarded(std::move(dropped), 1.0f);
      dropped = {};
    }
    std::vector<wire::ExpectedBlock> expect(teams, block);
    std::vector<kernels::SparseVec> pieces;
    absl::Status st =
        BruckAllGather(link, cross, expect, kPhaseTeamSync, times, std::move(mine), &pieces);
    if (!st.ok()) return st;
    kernels::SparseVec sum, next;
    {
      PhaseTimer t(&times->reduction_s);
      sum = std::move(pieces[0]);
      for (int t = 1; t < teams; ++t) {
        MergeSums(kernels::View(sum), kernels::View(pieces[t]), &next);
        std::swap(sum, next);
      }
    }
    size_t u = 0;
    for (float v : sum.val) u += v != 0.0f;
    stats->details["post_gather_count"] = static_cast<double>(u);
    {
      PhaseTimer t(&times->selection_s);
      Cut(kernels::View(sum), k_block, owned, &dropped);
      ledger.Discarded(std::move(dropped), 1.0f / static_cast<float>(teams));
    }
    if (asked == 0 && k_block < block.range.size()) controller_.Update(u);
    return absl::OkStatus();
  }

 private:
  BsagController controller_;
};

}  // namespace

GRADEX_REGISTER_ALGORITHM("spardl-bsag", [] { return std::make_unique<SparDLBsag>(); });

}  // namespace gradex::collectives::algorithms
