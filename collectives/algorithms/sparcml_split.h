// What the split-allgather algorithms share (sparcml-ssar-split,
// sparcml-dsar-split, topkdsa): every rank's local top-k, a split
// reduce-scatter (rank r sends the part of its selection in slice j straight
// to rank j, P-1 messages; the owner sums them into a sparse stream), then a
// Bruck all-gather of the reduced slices. They differ in the streams' policy
// and in the form the all-gather carries.
#ifndef GRADEX_COLLECTIVES_ALGORITHMS_SPARCML_SPLIT_H_
#define GRADEX_COLLECTIVES_ALGORITHMS_SPARCML_SPLIT_H_

#include "collectives/local_topk.h"
#include "collectives/residual_ledger.h"
#include "collectives/sparse_allreduce.h"
#include "collectives/wire/frame.h"
#include "collectives/wire/sparse_stream.h"

namespace gradex::collectives::algorithms {

enum SparcmlPhase : uint16_t {
  kPhaseSplitScatter = 1,
  kPhaseSplitGather = 2,
  kPhaseRdFold = 3,
  kPhaseRdExchange = 4,
  kPhaseRdUnfold = 5,
};

// The form the all-gather carries a reduced slice in.
enum class GatherForm {
  kStatic,    // sparse always (SSAR: the result is known to stay sparse)
  kPerSlice,  // each slice's own stream form: dense once it passed δ
  kDense,     // dense always (DSAR's dense second phase)
};

// min(P·k, n): the most non-zeros a sum of P top-k selections can have.
size_t SumOfSelectionsCapacity(int world, size_t n, double density);

class SparcmlSplit : public SparseAllreduce {
 public:
  absl::StatusOr<Volume> ModelVolume(int rank, int world, size_t n, const AllreduceOptions& options,
                                     const CallStats& observed) const final;
  // The local top-k is the call's local part (PrepareCall).
  absl::Status LocalSelection(const CallContext& ctx, const AllreduceOptions& options,
                              LocalInput& in, ResidualLedger& ledger, CallStats* stats) final;
  absl::Status Exchange(const CallContext& ctx, const AllreduceOptions& options,
                        std::span<float> acc, ResidualLedger& ledger, AllreduceResult* result,
                        CallStats* stats) final;

 protected:
  absl::Status CheckOptions(const CallContext& ctx, const AllreduceOptions& options) const final;
  virtual wire::StreamPolicy policy() const = 0;  // of the reduce-scatter streams
  virtual GatherForm gather_form() const = 0;

 protected:
  // The local top-k (LocalTopK) and an exchange that reads the residual
  // for its size: the residual may live on a device.
  bool DeviceLocalPart() const override { return true; }

 private:
  kernels::SparseVec mine_;  // LocalSelection's top-k, handed to Exchange
  LocalTopK local_;
};

}  // namespace gradex::collectives::algorithms

#endif  // GRADEX_COLLECTIVES_ALGORITHMS_SPARCML_SPLIT_H_
