// topka: every rank keeps the exact top-k of its gradient + residual (k =
// ceil(density * n) over the whole gradient; the rest stays in its residual),
// an all-gather brings every selection to every rank, and each rank sums the
// P selections locally (gather_sum.h). Volume 2k(P-1) entries per rank: the
// allgather-based baseline of Table 1 of the Ok-Topk paper.
#include "collectives/algorithms/gather_sum.h"
#include "collectives/block_layout.h"
#include "collectives/local_topk.h"

namespace gradex::collectives::algorithms {
namespace {

class TopkA final : public GatherSumAlgorithm {
 public:
  std::string_view name() const override { return "topka"; }

  // Every rank selects min(k, nonzeros) entries; the model prices k (the
  // sweep's data has far more than k nonzeros on every rank).
  absl::StatusOr<Volume> ModelVolume(int rank, int world, size_t n, const AllreduceOptions& options,
                                     const CallStats&) const override {
    const size_t k = KeepCount(options.density, n);
    return GatherVolume(rank, world, n, [k](int) { return k; });
  }

 protected:
  size_t Capacity(size_t n, const AllreduceOptions& options) const override {
    return KeepCount(options.density, n);
  }
  void Select(LocalInput& in, const AllreduceOptions& options, ResidualLedger& ledger,
              CallStats* stats, kernels::SparseVec* out) override {
    local_.Select(in, KeepCount(options.density, in.size()), options.threshold_reuse, ledger, stats,
                  out);
  }

 protected:
  // The local top-k (LocalTopK) and an exchange that reads the residual
  // for its size: the residual may live on a device.
  bool DeviceLocalPart() const override { return true; }

 private:
  LocalTopK local_;
};

}  // namespace

GRADEX_REGISTER_ALGORITHM("topka", [] { return std::make_unique<TopkA>(); });

}  // namespace gradex::collectives::algorithms
