// spardl-rsag: SparDL with R-SAG. Teams (a power of two) synchronise their
// blocks by recursive doubling, summing and re-selecting after each exchange;
// after step j the 2^(j+1) holders of the same sum each keep 1/2^(j+1) of
// what it discards.
#include "absl/strings/str_cat.h"
#include "collectives/algorithms/spardl_family.h"
#include "collectives/algorithms/sparse_steps.h"
#include "collectives/phase_timer.h"

namespace gradex::collectives::algorithms {
namespace {

class SparDLRsag final : public SparDLFamily {
 public:
  std::string_view name() const override { return "spardl-rsag"; }

 protected:
  // log2(T) recursive-doubling exchanges of the block.
  void SyncVolume(int teams, uint32_t size, size_t keep, size_t, Volume* v) const override {
    for (int bit = 1; bit < teams; bit <<= 1) {
      v->sent_bytes += wire::FrameBytes(size, keep);
      v->recv_bytes += wire::FrameBytes(size, keep);
      ++v->messages;
    }
  }

  absl::StatusOr<int> Teams(const AllreduceOptions& options, int world) const override {
    const int t = options.teams;
    if (t < 1 || world % t != 0 || (t & (t - 1)) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spardl-rsag needs a power-of-two team count dividing P=", world, ", got ", t));
    }
    return t;
  }

  absl::Status SyncTeams(Link& link, const Group& cross, const wire::ExpectedBlock& block,
                         const AllreduceOptions&, ResidualLedger& ledger, CallStats* stats,
                         kernels::SparseVec* owned) override {
    PhaseTimes* times = &stats->phases;
    std::vector<kernels::SparseVec> received;
    kernels::SparseVec merged, dropped;
    int holders = 1;
    for (int bit = 1, sub = 0; bit < cross.size(); bit <<= 1, ++sub) {
      const int partner = cross.ranks[cross.me ^ bit];
      transport::Bytes out;
      {
        PhaseTimer t(&times->communication_s);
        wire::AppendBlockFrame(link.meta(kPhaseTeamSync), block.range, kernels::View(*owned), &out);
      }
      absl::StatusOr<transport::Bytes> in =
          link.Exchange(partner, std::move(out), partner, kPhaseTeamSync, sub,
                        wire::ExpectedMessageBytes({&block, 1}));
      if (!in.ok()) return in.status();
      {
        PhaseTimer t(&times->communication_s);
        absl::Status st = wire::DecodeSparseBlocks(*in, link.meta(kPhaseTeamSync, partner),
                                                   {&block, 1}, &received);
        if (!st.ok()) return st;
      }
      {
        // Float addition commutes, so both partners compute the same sum.
        PhaseTimer t(&times->reduction_s);
        MergeSums(kernels::View(*owned), kernels::View(received[0]), &merged);
      }
      holders *= 2;
      PhaseTimer t(&times->selection_s);
      Cut(kernels::View(merged), block.capacity, owned, &dropped);
      ledger.Discarded(std::move(dropped), 1.0f / static_cast<float>(holders));
      dropped = {};
    }
    return absl::OkStatus();
  }
};

}  // namespace

GRADEX_REGISTER_ALGORITHM("spardl-rsag", [] { return std::make_unique<SparDLRsag>(); });

}  // namespace gradex::collectives::algorithms
