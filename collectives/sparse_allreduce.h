// The common interface of every gradient exchange algorithm: gradient and
// residual in, reduced (summed) result and new residual out, with per-call
// statistics. Algorithms are written against Transport and kernels only.
#ifndef GRADEX_COLLECTIVES_SPARSE_ALLREDUCE_H_
#define GRADEX_COLLECTIVES_SPARSE_ALLREDUCE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "catalog/catalog.h"
#include "collectives/local_input.h"
#include "collectives/residual_memory.h"
#include "collectives/wire/frame.h"
#include "kernels/sparse.h"
#include "transport/transport.h"

namespace gradex::collectives {

class ResidualLedger;

// Where a call runs: the communicator and the identity stamped on every frame.
struct CallContext {
  transport::Transport* transport = nullptr;
  uint64_t job_id = 0;
  uint32_t epoch = 0;
  // Unique per call in the epoch and the same on every rank (the agent's
  // CallId: step * 65536 + bucket): stamped on every frame and in every tag.
  uint64_t call_id = 0;
  transport::Deadline deadline;  // every wait inside the call ends by then
  // The training step the call belongs to (every bucket of a step shares it):
  // what step-driven schedules count, such as Ok-Topk's τ and τ'.
  uint64_t training_step = 0;
  // The call's bucket within the training step (issue order) and the sizes
  // of the step's buckets, when the caller knows them (COVAP counts parts
  // across all buckets); empty: this bucket alone.
  uint32_t bucket_index = 0;
  std::span<const size_t> step_buckets;
  // The most bytes one received message of the call may hold (Link posts
  // every receive with it, so a peer's announced length is never allocated
  // beyond it); 0: SparseAllreduce::Run sets MessageBound(n, P).
  size_t max_message_bytes = 0;
  // Where a frame refused in the call blames its sender (null: nowhere; the
  // agent's, which reports it to the coordinator).
  wire::FrameBlame* blame = nullptr;
  // Received NaN and infinite values are refused as bad frames (a rule the
  // epoch's ranks agree on in-band, so an honest sender sends none).
  bool refuse_nonfinite = false;
};

// What one message of a call on n elements among P ranks can hold at most:
// every rank's whole bucket as COO (8 bytes an entry) with a frame header per
// rank and block, and room for the small control messages (counts,
// thresholds). Derived only from what the receiver knows (docs/security.md).
size_t MessageBound(size_t n, int world);
// What the call is asked to do: the plan's density and team count (the
// coordinator decides them for every algorithm) and the algorithm's own
// parameters by catalog name (catalog/algorithms.cc), e.g. B-SAG's "kprime"
// (0: the algorithm's k' controller), Ok-Topk's "oktopk_tau" and
// "oktopk_tau_prime", SparCML's "quantize_bits". An algorithm reads its own
// with SparseAllreduce::Param (the catalog default when absent) and ignores
// names its entry lacks, so one sweep may set a value for every algorithm.
struct AllreduceOptions {
  double density = 0.01;  // k = ceil(density * block size), per block
  int teams = 1;          // SparDL SAG team count; must divide P
  catalog::ParamValues params;
  // The top-k local parts predict this call's threshold from the bucket's
  // last one (kernels::ThresholdReuse): the same selection, fewer passes. A
  // rank's own choice: the results do not depend on it.
  bool threshold_reuse = true;
};

// Wall time of the call split by what it was doing.
struct PhaseTimes {
  double selection_s = 0;      // top-k selections and compaction
  double communication_s = 0;  // posting, waiting, framing, validation
  double reduction_s = 0;      // merge-adds and dense sums, residual updates
};

struct CallStats {
  PhaseTimes phases;
  double total_s = 0;
  uint64_t sent_bytes = 0;  // this call, all peers, frame headers included
  uint64_t recv_bytes = 0;
  uint64_t messages_sent = 0;
  size_t result_nnz = 0;       // non-zeros of the result
  size_t result_capacity = 0;  // the most non-zeros the algorithm promises
  // Data-dependent volumes (Ok-Topk): the selected counts, and the COO entries
  // and frames this rank framed and sent / decoded and received, which its
  // volume model prices at 8 bytes an entry and 48 a frame.
  uint64_t coo_entries_sent = 0;
  uint64_t coo_entries_recv = 0;
  uint64_t frames_sent = 0;
  uint64_t frames_recv = 0;
  // SparCML family: every frame this rank sent / received, in schedule order:
  // its entries when sparse, kDenseFrameMark when dense. The fill-in (hence
  // the volume) depends on the data; the volume model prices these frames.
  std::vector<uint64_t> stream_frames_sent;
  std::vector<uint64_t> stream_frames_recv;
  // The algorithm's own details of the call, by name, which metrics and
  // bench print without knowing them: e.g. B-SAG's "kprime_used" (k') and
  // "post_gather_count" (u, entries after the cross-team gather), the
  // selections' "local_selected" (entries this rank selected from grad +
  // residual) and Ok-Topk's "global_selected" (entries of the global
  // selection, all ranks).
  std::map<std::string, double, std::less<>> details;
  // details[name], 0 when the call did not set it.
  double Detail(std::string_view name) const {
    auto it = details.find(name);
    return it == details.end() ? 0 : it->second;
  }
};

// The summed result: COO (sorted, unique) or, for dense algorithms, dense.
struct AllreduceResult {
  bool is_dense = false;
  std::vector<float> dense;   // n values when is_dense
  kernels::SparseVec sparse;  // when !is_dense; may hold explicit zeros
  // What error feedback's coefficient took out of this rank's old residual
  // this call, (1 - c) * residual_in per element (n values), or empty when the
  // algorithm keeps its whole residual (c = 1: every algorithm but COVAP).
  // It leaves the exchange for good, so conservation reads, per element and
  // summed over ranks: grad + residual_in = result + residual_out + decayed.
  std::vector<float> decayed;
  void ToDense(std::span<float> out) const;
  size_t CountNonZeros() const;
};

// What the invariant tests may expect of an algorithm: its catalog traits.
using AlgorithmTraits = catalog::Traits;

// Bytes one rank sends and receives in one call under the algorithm's α-β
// model (frame headers included).
struct Volume {
  uint64_t sent_bytes = 0;
  uint64_t recv_bytes = 0;
  uint64_t messages = 0;  // messages sent
};

class SparseAllreduce {
 public:
  SparseAllreduce();
  virtual ~SparseAllreduce();
  // The catalog name (catalog/algorithms.cc); its entry supplies the rest.
  virtual std::string_view name() const = 0;
  // The catalog entry's traits and frame id (defaults when the catalog lacks
  // the name, which registration refuses).
  AlgorithmTraits traits() const;
  wire::AlgorithmId id() const;
  // The parameter `name` of this algorithm in `options`, else its catalog
  // default (0 when the entry lacks it).
  double Param(const AllreduceOptions& options, std::string_view name) const;

  // The model's bytes for the call `observed` describes (data-dependent models
  // read what they need from it, e.g. B-SAG's k'). Invariant 4 holds measured
  // bytes against it: never above it, and within a tolerance the algorithm's
  // test states.
  virtual absl::StatusOr<Volume> ModelVolume(int rank, int world, size_t n,
                                             const AllreduceOptions& options,
                                             const CallStats& observed) const = 0;

  // grad: this rank's gradient (n elements, same n on every rank).
  // residual: in, the residual kept from earlier calls; out, the new one.
  // Returns the SUM over ranks of the (sparsified) gradients. On error the
  // residual holds grad + old residual (this rank's whole contribution is kept
  // for the next call, nothing is lost) and the result is unspecified. A
  // failed call leaves the transport as it is: its owner (agent, bench,
  // client) aborts it, so that peers waiting on this rank fail now.
  // The call frame, written once (call_frame.cc): checks, statistics, the
  // accumulation into the residual and its ledger around Exchange.
  absl::Status Run(const CallContext& ctx, const AllreduceOptions& options,
                   std::span<const float> grad, std::span<float> residual, AllreduceResult* result,
                   CallStats* stats);

  // Run in two halves, so that a caller can select one bucket while another
  // exchanges (the client's pipeline, docs/architecture.md "Client").
  // PrepareCall: the checks, the accumulation of grad into the residual and
  // the algorithm's local part (LocalSelection: what it does before its
  // first message). It sends nothing and asks the transport only its rank
  // and size, so it may run on another thread than the one exchanging
  // another call on the same transport. On error the residual holds grad +
  // old residual and nothing is pending. `ctx` (and what its spans point
  // at), `grad` and `residual` must stay valid until the call ends.
  // `velocity` (may be empty; else as long as grad, valid as long) with
  // `momentum` in [0, 1): DGC's momentum correction, fused into the same
  // pass: velocity = velocity * momentum + grad, and the velocity, not grad,
  // joins the residual (what a failed call keeps too).
  // `memory` (null: host memory) holds grad, residual and velocity, which
  // the call then never reads but through it; only for a call where
  // DeviceResidual(ctx, options) holds (FAILED_PRECONDITION otherwise).
  absl::Status PrepareCall(const CallContext& ctx, const AllreduceOptions& options,
                           std::span<const float> grad, std::span<float> residual,
                           std::span<float> velocity = {}, float momentum = 0,
                           ResidualMemory* memory = nullptr);
  // True for an algorithm whose LocalSelection works only through LocalTopK
  // (or LocalInput's memory) and whose Exchange reads its `acc` for the size
  // alone, taking values out or owing them back only through the ledger.
  virtual bool DeviceLocalPart() const { return false; }
  // Whether a call at `options` may keep its residual in a ResidualMemory:
  // the algorithm's local part selects through LocalTopK, its exchange reads
  // the residual for its size alone, and the residual does not decay.
  bool DeviceResidual(const CallContext& ctx, const AllreduceOptions& options) const {
    return DeviceLocalPart() && ResidualCoefficient(ctx, options) == 1.0f;
  }
  // The prepared call's schedule (its messages), then the ledger's commit or
  // restore, as Run. `stats` gets the whole call's: phases of both halves,
  // bytes of the exchange, total_s the two halves' sum (not the time the
  // prepared call waited in between). `deadline`, when given, replaces the
  // context's (a deadline counted from the exchange's start, not from the
  // preparation).
  absl::Status ExchangeCall(AllreduceResult* result, CallStats* stats,
                            std::optional<transport::Deadline> deadline = std::nullopt);
  // Gives the prepared call up unexchanged: the residual holds grad + old
  // residual again (exactly: the selected values are put back).
  void AbandonCall();
  bool call_pending() const { return pending_ != nullptr; }

 protected:
  // The algorithm's own checks of `options`, before anything is touched.
  virtual absl::Status CheckOptions(const CallContext& ctx, const AllreduceOptions& options) const {
    return absl::OkStatus();
  }
  // The local part of a call, before its first message (PrepareCall): it
  // adds the gradient into the residual (in.Accumulated(), or fused into its
  // first pass over it: LocalInput), may take values out of it (recording
  // them in `ledger`) and keeps what it selected in the object for Exchange.
  // It must not send or receive. Default: nothing (the whole schedule is in
  // Exchange: the algorithms whose selection is interleaved with their
  // messages); whatever the local part leaves unaccumulated, the frame
  // accumulates after it.
  virtual absl::Status LocalSelection(const CallContext& ctx, const AllreduceOptions& options,
                                      LocalInput& in, ResidualLedger& ledger, CallStats* stats) {
    return absl::OkStatus();
  }
  // The schedule. `acc` (the residual) holds grad + old residual (times
  // ResidualCoefficient, 1 but for COVAP), this rank's whole contribution;
  // values taken out of it are recorded in `ledger` (Selected) and values
  // owed back to it too (Discarded). The frame commits the ledger when
  // Exchange succeeds and restores it when it fails. Fills the result,
  // stats->result_nnz / result_capacity and the algorithm's details.
  virtual absl::Status Exchange(const CallContext& ctx, const AllreduceOptions& options,
                                std::span<float> acc, ResidualLedger& ledger,
                                AllreduceResult* result, CallStats* stats) = 0;
  // After a failed call (the residual restored): drops state that belonged
  // to the failed epoch.
  virtual void AfterFailure() {}
  // Error feedback's coefficient c for this call (COVAP's scheduler): the
  // frame adds c * residual, not the whole residual, to the gradient and
  // reports the rest in result->decayed. 1 (the default): nothing decays.
  virtual float ResidualCoefficient(const CallContext& ctx, const AllreduceOptions& options) const {
    return 1.0f;
  }

 private:
  struct Pending;
  // Puts grad + old residual back after a failure or an abandon.
  void Unwind();

  // The call frame's scratch when the coefficient is below 1: the old
  // residual (put back on failure) and the decayed part, kept across calls.
  std::vector<float> ef_prior_, ef_decayed_;
  // The call between PrepareCall and ExchangeCall / AbandonCall.
  std::unique_ptr<Pending> pending_;
};

// The schedules, by catalog name. Each algorithm's .cc registers its factory
// with GRADEX_REGISTER_ALGORITHM; the name must be in the catalog.
using AllreduceFactory = std::function<std::unique_ptr<SparseAllreduce>()>;
absl::Status RegisterAlgorithm(std::string_view name, AllreduceFactory factory);

#define GRADEX_REGISTER_ALGORITHM_CONCAT2(a, b) a##b
#define GRADEX_REGISTER_ALGORITHM_CONCAT(a, b) GRADEX_REGISTER_ALGORITHM_CONCAT2(a, b)
// At namespace scope in the algorithm's .cc. A name the catalog lacks aborts
// at start-up (a programming error a test would otherwise miss).
#define GRADEX_REGISTER_ALGORITHM(name, factory)                       \
  [[maybe_unused]] static const bool GRADEX_REGISTER_ALGORITHM_CONCAT( \
      gradex_registered_algorithm_, __LINE__) =                        \
      ::gradex::collectives::internal::RegisterOrDie(name, factory)

namespace internal {
bool RegisterOrDie(std::string_view name, AllreduceFactory factory);
}  // namespace internal

// The schedule of a catalog algorithm; NOT_FOUND lists the known names.
absl::StatusOr<std::unique_ptr<SparseAllreduce>> CreateAllreduce(std::string_view name);

// Every catalog algorithm with a registered schedule, by catalog id: what the
// invariant sweep, the dead-peer suites, bench and the agents iterate.
struct CatalogAlgorithm {
  const catalog::AlgorithmSpec* spec;
  AllreduceFactory create;
};
std::vector<CatalogAlgorithm> CatalogAlgorithms();
std::vector<std::string> AllreduceNames();

}  // namespace gradex::collectives

#endif  // GRADEX_COLLECTIVES_SPARSE_ALLREDUCE_H_
