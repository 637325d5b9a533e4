// The exchange topka and gaussiank share: every rank contributes one sparse
// selection of the whole gradient (at most `capacity` entries), a Bruck
// all-gather brings all P selections to every rank (ceil(log2 P) messages,
// P-1 selections in and out per rank, like a ring but with log P latencies),
// and every rank sums them in the same fixed pairwise order, so every rank
// gets the same bits.
#ifndef GRADEX_COLLECTIVES_ALGORITHMS_GATHER_SUM_H_
#define GRADEX_COLLECTIVES_ALGORITHMS_GATHER_SUM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "collectives/link.h"
#include "collectives/residual_ledger.h"
#include "collectives/sparse_allreduce.h"
#include "kernels/sparse.h"

namespace gradex::collectives::algorithms {

// A selection-then-all-gather algorithm: Select() picks this rank's entries
// out of gradient + residual (zeroing them there), the rest is shared.
class GatherSumAlgorithm : public SparseAllreduce {
 public:
  // The selection is the call's local part: it runs in PrepareCall.
  absl::Status LocalSelection(const CallContext& ctx, const AllreduceOptions& options,
                              LocalInput& in, ResidualLedger& ledger, CallStats* stats) final;
  absl::Status Exchange(const CallContext& ctx, const AllreduceOptions& options,
                        std::span<float> acc, ResidualLedger& ledger, AllreduceResult* result,
                        CallStats* stats) final;

 protected:
  // The most entries one rank selects from n elements at `options`.
  virtual size_t Capacity(size_t n, const AllreduceOptions& options) const = 0;
  // Selects this rank's entries out of gradient + residual (`in`): appends
  // them to *out (sorted), zeroes them in the residual and records them in
  // the ledger, timing the selection. At most Capacity() entries.
  virtual void Select(LocalInput& in, const AllreduceOptions& options, ResidualLedger& ledger,
                      CallStats* stats, kernels::SparseVec* out) = 0;

  // Bytes of the Bruck all-gather for rank `rank` when member j's selection
  // has count(j) entries.
  template <typename CountFn>
  static Volume GatherVolume(int rank, int world, size_t n, CountFn count);

 private:
  kernels::SparseVec mine_;  // this rank's selection, from LocalSelection to Exchange
};

template <typename CountFn>
Volume GatherSumAlgorithm::GatherVolume(int rank, int world, size_t n, CountFn count) {
  Volume v;
  const uint32_t size = static_cast<uint32_t>(n);
  for (int dist = 1; dist < world; dist <<= 1) {
    const int blocks = dist < world - dist ? dist : world - dist;
    for (int j = 0; j < blocks; ++j) {
      v.sent_bytes += wire::FrameBytes(size, count((rank + j) % world));
      v.recv_bytes += wire::FrameBytes(size, count((rank + dist + j) % world));
    }
    ++v.messages;
  }
  return v;
}

}  // namespace gradex::collectives::algorithms

#endif  // GRADEX_COLLECTIVES_ALGORITHMS_GATHER_SUM_H_
