// The worker side of DGS (docs/architecture.md "DGS"; the DGS seed's worker
// algorithm and SAMomentum; DESIGN.md "DGS"): pure state, no transport.
//
// Per step, per layer j, with m the momentum, wd the weight decay, w the
// worker's parameters and g its gradient:
//   a = m·u + lr·(g + wd·w)                  (SAMomentum's velocity candidate)
//   S = the top R% of |a| in layer j (kernels' top-k rule: ties to the
//       lower index, zeros never selected), R = density·lr/lr0 capped at 1
//   push  = -a on S   (the signed change to add to the model: θ ← θ − g)
//   u     = a on S,  a / m off S   (unsent entries divided by the momentum,
//                                  so that m·u re-adds them undecayed)
// The worker's parameters change only by what the servers return: ApplyPull
// adds a kPull's model difference into them and a kFullSync replaces the
// range. density >= 1 is plain ASGD with worker momentum: R = 1 whatever lr,
// every nonzero pushed (dense), and the server returns every nonzero of
// M − v_k (dense pull), so params equal M after each pull. At R = 1 the push
// and the pull take the dense route (kDensePush / kDensePull, dgs_dense.h):
// values of the whole range, no indices, one pass each; the bits are those
// of the sparse route (a zero is no entry).
//
// A push a shard did not apply (refused, never sent) is put back with
// Unsend: its entries become unsent ones (u = a/m), exactly as if they had
// not been selected, so that the next step carries them again.
//
// The state also keeps, per server shard, whether the worker has joined it
// and the version of its last pull (the push's base version); the exchange
// (dgs_exchange.h) reads and sets them.
#ifndef GRADEX_PS_DGS_WORKER_H_
#define GRADEX_PS_DGS_WORKER_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/sparse.h"
#include "ps/dgs_frames.h"
#include "ps/dgs_layout.h"

namespace gradex::ps {

struct DgsWorkerOptions {
  float momentum = 0.9f;       // m, in (0, 1] (SAMomentum divides by it)
  float weight_decay = 5e-4f;  // wd, >= 0
  float density = 0.01f;       // in (0, 1]; 1 = ASGD (dense both ways)
  // lr0 of R = density·lr/lr0; 0 takes the lr of the first step.
  float lr0 = 0;
};

// A worker's push: the signed change to M and the R it was selected at. At
// R < 1 `entries` (global indices sorted ascending, layer by layer); at R = 1
// `dense` (layout.total() values, a zero meaning no entry; `entries` empty).
struct DgsPush {
  kernels::SparseVec entries;
  std::vector<float> dense;
  bool is_dense = false;
  float ratio = 1;
  uint64_t nnz = 0;  // entries carried (the nonzeros of `dense`)
};

// The push as sorted entries whatever its route (tests and traces).
kernels::SparseVec DgsPushEntries(const DgsPush& push);

class DgsWorkerState {
 public:
  // INVALID_ARGUMENT naming the option when it is out of range, or when the
  // shard ranges do not cover the layout in order.
  static absl::StatusOr<DgsWorkerState> Create(const DgsLayout& layout, uint32_t worker,
                                               std::vector<DgsRange> shard_ranges,
                                               const DgsWorkerOptions& options);

  // One SAMomentum step: updates the velocity u and fills `push` (replaced).
  // grad and params have layout.total() elements; lr > 0 and finite. A NaN
  // or Inf in a (from g, w or an overflow) refuses the step, u untouched.
  absl::Status MakePush(std::span<const float> grad, std::span<const float> params, float lr,
                        DgsPush* push);

  // Applies a decoded kPull (adds its entries into params) or kFullSync
  // (copies the range into params) from shard `shard`, and records its
  // version. Refused, params untouched, when the message is not for this
  // worker or shard, is a kRefused, or its version is below the last one
  // this worker applied from that shard (FAILED_PRECONDITION naming it).
  // `entries`, when given, receives the count of entries added (0 for a
  // full sync).
  absl::Status ApplyPull(uint32_t shard, const DgsMessage& pull, std::span<float> params,
                         uint64_t* entries = nullptr);

  // Puts back the part of `push` (this state's last MakePush) inside shard
  // `shard`'s range that the shard did not apply: those entries become
  // unsent (u = a/m, MakePush's rule for unselected entries), so the next
  // step re-adds a undecayed, exactly when m is a power of two as for any
  // unsent entry. Call it before the next MakePush; returns the count of
  // entries put back.
  uint64_t Unsend(uint32_t shard, const DgsPush& push);

  // The R a step at `lr` selects at: 1 at density >= 1, else
  // min(1, density·lr/lr0) (lr0: the option, or the first step's lr).
  double Ratio(float lr) const;

  const DgsLayout& layout() const { return layout_; }
  uint32_t worker() const { return worker_; }
  const std::vector<DgsRange>& shard_ranges() const { return shards_; }
  std::span<const float> velocity() const { return u_; }

  // Per shard: joined (a full sync applied since the last Leave) and the
  // version of the last pull applied.
  bool joined(uint32_t shard) const { return joined_[shard]; }
  uint64_t version(uint32_t shard) const { return versions_[shard]; }
  // Forgets the join with `shard` (after a refusal or a failed exchange):
  // the next exchange says hello and takes a full sync.
  void Leave(uint32_t shard) { joined_[shard] = false; }

 private:
  DgsWorkerState(const DgsLayout& layout, uint32_t worker, std::vector<DgsRange> shards,
                 const DgsWorkerOptions& options);
  DgsLayout layout_;
  uint32_t worker_;
  std::vector<DgsRange> shards_;
  float Unsent(float a) const;  // a / m, MakePush's rule for unsent entries
  DgsWorkerOptions options_;
  bool exact_inverse_ = false;  // m a power of two: a·(1/m) is exactly a/m
  std::vector<float> u_;
  std::vector<uint8_t> joined_;
  std::vector<uint64_t> versions_;
  std::vector<float> scratch_;
};

}  // namespace gradex::ps

#endif  // GRADEX_PS_DGS_WORKER_H_
