// What the three SparDL variants share: accumulate gradient + residual, run
// Spar-Reduce-Scatter inside each team, synchronise the teams (a variant's own
// step), then a Bruck all-gather inside each team, and commit the residuals.
#ifndef GRADEX_COLLECTIVES_ALGORITHMS_SPARDL_FAMILY_H_
#define GRADEX_COLLECTIVES_ALGORITHMS_SPARDL_FAMILY_H_

#include "collectives/algorithms/sparse_steps.h"
#include "collectives/block_layout.h"
#include "collectives/link.h"
#include "collectives/local_topk.h"
#include "collectives/residual_ledger.h"
#include "collectives/sparse_allreduce.h"

namespace gradex::collectives::algorithms {

// Phases stamped on SparDL frames (and used in tags).
enum SparDLPhase : uint16_t {
  kPhaseSrs = 1,
  kPhaseTeamSync = 2,
  kPhaseAllGather = 3,
};

class SparDLFamily : public SparseAllreduce {
 public:
  absl::StatusOr<Volume> ModelVolume(int rank, int world, size_t n, const AllreduceOptions& options,
                                     const CallStats& observed) const final;

  // Spar-Reduce-Scatter's first selection (per block of the team layout)
  // is the call's local part: it runs in PrepareCall.
  absl::Status LocalSelection(const CallContext& ctx, const AllreduceOptions& options,
                              LocalInput& in, ResidualLedger& ledger, CallStats* stats) final;
  absl::Status Exchange(const CallContext& ctx, const AllreduceOptions& options,
                        std::span<float> acc, ResidualLedger& ledger, AllreduceResult* result,
                        CallStats* stats) final;

 protected:
  absl::Status CheckOptions(const CallContext& ctx, const AllreduceOptions& options) const final;
  // The team count this variant uses for `options` on `world` ranks, or an
  // error when the variant cannot run with it.
  virtual absl::StatusOr<int> Teams(const AllreduceOptions& options, int world) const = 0;
  // Makes `owned` (this rank's reduced block of the team layout) the same on
  // every rank of `cross` (the ranks at this position in every team), cut to
  // `keep` entries; discards go to the ledger.
  virtual absl::Status SyncTeams(Link& link, const Group& cross, const wire::ExpectedBlock& block,
                                 const AllreduceOptions& options, ResidualLedger& ledger,
                                 CallStats* stats, kernels::SparseVec* owned) = 0;
  // Adds the bytes SyncTeams sends and receives on a block of `size`
  // elements keeping `keep` entries (B-SAG: `kprime` pre-selected) to `v`.
  virtual void SyncVolume(int teams, uint32_t size, size_t keep, size_t kprime,
                          Volume* v) const = 0;

 protected:
  // The local top-k (LocalTopK) and an exchange that reads the residual
  // for its size: the residual may live on a device.
  bool DeviceLocalPart() const override { return true; }
  // A failed call ends the epoch: the next starts from equal blocks again.
  void AfterFailure() override { bounds_.clear(); }
  // The sum of two pieces of a block: with the residuals sent home a sum that
  // cancels is kept as -0 (kernels::MergeAddKeepCancelled), so that it is
  // delivered (as 0) and its parts do not return home at every call.
  void MergeSums(kernels::SparseView a, kernels::SparseView b, kernels::SparseVec* out) const {
    gradex::collectives::algorithms::MergeSums(a, b, keep_cancelled_, out);
  }
  // The top `k` of `in` (kernels::SparseTopK); with the residuals sent home,
  // room left is filled with cancelled sums (CutToKeep).
  void Cut(kernels::SparseView in, size_t k, kernels::SparseVec* kept,
           kernels::SparseVec* dropped) const {
    CutToKeep(in, k, keep_cancelled_, kept, dropped);
  }

 private:
  // The team layout of this call: the balanced boundaries once learnt
  // (spardl_balance.h), else the paper's equal blocks.
  BlockLayout Layout(size_t n, int parts, double density) const;
  // After a successful call: every spardl_balance_tau calls, the boundaries
  // the next calls use, from this call's result.
  void Rebalance(const CallContext& ctx, const AllreduceOptions& options, const BlockLayout& layout,
                 const kernels::SparseVec& result);

  // Whether this call sends residuals home (spardl_residual_home): only where
  // something is cut and every block goes on the wire sparse, the encoding
  // that carries a cancelled sum's -0 (a dense frame reads it as absent).
  bool SendsHome(const AllreduceOptions& options, const BlockLayout& layout, size_t n) const;

  // This call's SendsHome, for MergeSums.
  bool keep_cancelled_ = false;
  // LocalSelection's blocks, handed to Exchange.
  std::vector<kernels::SparseVec> held_;
  LocalTopK local_;
  // Balanced boundaries (empty: equal blocks), for one bucket size, team
  // layout and epoch.
  std::vector<size_t> bounds_;
  size_t n_ = 0;
  int parts_ = 0;
  uint32_t epoch_ = 0;
};

}  // namespace gradex::collectives::algorithms

#endif  // GRADEX_COLLECTIVES_ALGORITHMS_SPARDL_FAMILY_H_
