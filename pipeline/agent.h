// The agent runtime: one per GPU (embedded in the trainer, or driven by
// gradex-agent). It joins the coordinator with its transport address, builds
// one communicator per epoch, runs the plan's collective on every bucket of
// every step, keeps the residual of each bucket across steps and epochs, and
// reports step statistics without ever waiting on the coordinator inside a
// step.
//
// Plan changes: values all ranks must agree on are switched at plan barriers
// (steps that are multiples of tau) to the version the members agree on
// in-band (epoch_sync.h); B-SAG's k' is read from the newest plan at every
// step. A failed step (dead peer, deadline, bad frame) aborts the
// communicator so every peer fails fast, keeps this rank's whole contribution
// in its residual (the failed bucket's and every later bucket's of the step),
// and the next step re-joins and enters the next epoch.
//
// One way to drive it: the BucketPipeline (bucket_pipeline.h), which owns
// every bucket's state and runs a step's buckets one by one, of any size,
// selecting bucket b+1 while bucket b exchanges. WholeStep (whole_step.h:
// gradex-agent's synthetic gradients, bench) is a loop over a pipeline of its
// own. The per-bucket calls below (BeginStep, PlanBucket, PrepareBucket,
// ExchangeBucket, AbandonBucket, EndStep) are the pipeline's alone; both
// stand above the agent, which includes neither.
#ifndef GRADEX_PIPELINE_AGENT_H_
#define GRADEX_PIPELINE_AGENT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "catalog/node_layout.h"
#include "collectives/sparse_allreduce.h"
#include "member/bucket_choice.h"
#include "member/control_plane.h"
#include "member/transport_provider.h"
#include "member/wait_tracker.h"
#include "pipeline/agent_metrics.h"

namespace gradex::pipeline {

class BucketPipeline;
class WholeStep;

struct AgentOptions {
  std::string job;
  std::string token;
  std::string agent_id;  // stable for the agent's life; unique in the job
  std::string host;
  int local_rank = 0;
  std::string device = "cpu";
  size_t elements = 0;  // n per bucket (WholeStep only)
  int buckets = 1;      // buckets per step (WholeStep only)
  // This rank's per-bucket rules (bucket_choice.h; CheckBucketRules' bounds,
  // else Start fails). Every rank of an epoch applies the lowest rank's,
  // agreed at the epoch's entry; a rank whose own differ warns once on stderr
  // (and counts it in gradex_agent_rules_disagreements_total). The defaults
  // change nothing (gradex-agent runs the plan's algorithm).
  member::BucketRules rules;
  // Waiting for an epoch that includes this agent (start, after a failure).
  std::chrono::milliseconds join_timeout{60000};
  std::chrono::milliseconds rpc_timeout{5000};    // each control-plane call
  std::chrono::milliseconds sync_timeout{30000};  // in-band agreement (entry waits for peers)
};

// What one step produced, per bucket.
struct StepOutcome {
  uint64_t step = 0;
  uint32_t epoch = 0;
  int rank = 0;
  int world = 0;
  uint64_t plan_version = 0;
  std::string algorithm;
  double density = 0;
  std::vector<collectives::AllreduceResult> results;
  std::vector<collectives::CallStats> stats;
  double seconds = 0;
};

// One bucket's state across steps, owned by the caller of RunBucket: its
// residual (error feedback) and its algorithm objects, which are made anew
// when the epoch or the bucket's algorithm changes (their state, such as
// B-SAG's controller or Ok-Topk's thresholds, was learnt for another P or
// belongs to another schedule).
struct DeviceResiduals;  // device_path.h

struct BucketSlot {
  std::vector<float> residual;  // empty: zeros of the bucket's size
  // Momentum correction's velocity u (the bucket pipeline's), laid out like
  // the residual, and per span of the layout whether u has been set (a
  // span's first step takes u = g).
  std::vector<float> velocity;
  std::vector<uint8_t> velocity_live;
  // A device bucket's residual and velocity on its GPU (the pipeline's
  // device path): while set they are the slot's state, and the two vectors
  // above are stale until the pipeline copies them back.
  std::shared_ptr<DeviceResiduals> device;
  std::unique_ptr<collectives::SparseAllreduce> algorithm;
  std::unique_ptr<collectives::SparseAllreduce> dense;  // start_iter, small buckets, probes
  uint32_t epoch = 0;                                   // the epoch the objects were made for
};

// What one bucket produced.
struct BucketOutcome {
  collectives::AllreduceResult result;
  collectives::CallStats stats;
  std::string algorithm;  // what ran
  // How: "hierarchical (<layout>)" or "flat (<why>)" (Agent::exchange_layout).
  std::string exchange;
  // A shadow probe ran (BucketRules::dense_probe_period): a dense exchange of
  // zeros the size of the bucket, timed beside its own exchange.
  bool dense_probe = false;
  // A warm-up step's shadow probe (BucketRules::start_iter): the sparse
  // exchange the bucket is planned to run, on a copy of its gradient.
  bool sparse_probe = false;
  double probe_seconds = 0;  // the probe's exchange, wall
  double seconds = 0;        // the exchange, wall
  // L2 of the bucket's residual after a successful exchange: one pass, for
  // the agent's metrics and the caller's stats.
  double residual_l2 = 0;
};

// The L2 norm of a residual (accumulated in double).
double ResidualL2(std::span<const float> residual);
struct BucketCall;
// The L2 norm of a planned call's residual, wherever it lives (NaN when its
// memory failed to say).
double CallResidualL2(const BucketCall& call);

// One bucket of the open step split in three (the client's pipeline selects
// bucket b+1 on another thread while bucket b exchanges): PlanBucket (the
// algorithm, the call's context), PrepareBucket (the call frame's local part:
// gradient into the residual, the local selection) and ExchangeBucket (the
// messages). Not copyable: the context points into it.
struct BucketCall {
  BucketCall() = default;
  BucketCall(const BucketCall&) = delete;
  BucketCall& operator=(const BucketCall&) = delete;

  uint32_t bucket = 0;
  BucketSlot* slot = nullptr;
  std::span<const float> grad;
  // The residual the call works on (slot->residual, or the slot's device
  // copy) and where grad, residual and velocity live (null: host memory).
  std::span<float> residual;
  collectives::ResidualMemory* memory = nullptr;
  // DGC's momentum correction left to the call (fused into its first pass
  // over the residual): velocity = velocity * momentum + grad, and the
  // velocity joins the residual. Empty: grad joins it as is.
  std::span<float> velocity;
  float momentum = 0;
  std::vector<size_t> step_buckets;  // ctx.step_buckets points here
  std::string algorithm;             // what runs
  bool dense_probe = false;
  bool sparse_probe = false;
  std::string probe_algorithm;                       // sparse_probe: what it times
  collectives::SparseAllreduce* schedule = nullptr;  // null: nothing to exchange (see status)
  // dense_probe: the slot's dense object, timed on zeros; sparse_probe: the
  // slot's sparse object, timed on a copy of the gradient.
  collectives::SparseAllreduce* probe = nullptr;
  collectives::CallContext ctx;
  collectives::AllreduceOptions options;
  // Where the bucket's gradient is: not yet in the residual, prepared (a
  // call pending in `schedule`), kept (in the residual: grad + old residual)
  // or exchanged.
  enum class State { kFresh, kPrepared, kKept, kDone } state = State::kFresh;
  // A refusal (bad size, bad index: the step goes on, nothing is kept, as
  // RunBucket's) or the error planning or preparing met (the exchange then
  // fails the step with it and keeps the gradient).
  absl::Status status;
  bool refused = false;
  double prepare_s = 0;  // PrepareBucket, wall
  // Called by ExchangeBucket with the outcome of a successful exchange,
  // before it reads the residual's norm (may be empty): the device path
  // writes the result there, so that the norm's wait also covers the writes.
  std::function<void(const BucketOutcome&)> on_result;
};

// The call id of bucket `bucket` (< kMaxStepBuckets) of step `step`: unique
// per call and the same on every rank whatever the step's bucket count.
inline constexpr uint64_t kMaxStepBuckets = 65536;
inline constexpr uint64_t CallId(uint64_t step, uint32_t bucket) {
  return step * kMaxStepBuckets + bucket;
}

// The frame job id for a job name (FNV-1a), the same on every agent.
uint64_t JobId(const std::string& job);

// DATA_LOSS naming the bucket and how many of its residual entries were NaN
// or infinite at the call's accumulation pass (the first one's element):
// reset to 0 and exchanged as 0, so no peer and no later step saw them; OK
// when there were none (CallStats detail "residual_nonfinite").
absl::Status NonFiniteResidual(uint32_t bucket, const collectives::CallStats& stats);

class Agent {
 public:
  // `control`, `transports` and `metrics` (may be null) outlive the agent.
  Agent(AgentOptions options, member::ControlPlane* control, member::TransportProvider* transports,
        AgentMetrics* metrics);
  ~Agent();

  // Joins the job (bounded by rpc_timeout). The first step waits for the
  // rendezvous.
  absl::Status Start();

  absl::Status Leave();

  uint64_t next_step() const { return next_step_; }
  // Restores the step counter (a checkpoint) before the first epoch: the
  // epoch's entry agreement then takes the largest step of its members.
  // FAILED_PRECONDITION once connected or inside a step.
  absl::Status set_next_step(uint64_t step);
  uint32_t epoch() const { return plan_ == nullptr ? 0 : plan_->epoch; }
  int rank() const { return rank_; }
  bool connected() const { return transport_ != nullptr; }
  const member::Plan* plan() const { return plan_.get(); }
  // The per-bucket rules agreed for the current epoch (this rank's own
  // before the first entry).
  const member::BucketRules& rules() const { return rules_; }
  // Fields of this rank's own rules found different from the agreed ones,
  // counted once per warning.
  uint64_t rules_disagreements() const { return rules_disagreements_; }
  // How the current epoch exchanges: "hierarchical (2 nodes x 4 ranks)" or
  // "flat (<why>)"; "" before the first epoch. Read between steps.
  const std::string& exchange_layout() const { return layout_line_; }
  // Whether the current epoch runs the hierarchical exchange, and its layout.
  bool hierarchical() const { return hierarchical_; }
  const catalog::NodeLayout& node_layout() const { return layout_; }
  // The communicator of the current epoch (tests kill it to simulate a crash),
  // under the wait tracker's decorator.
  transport::Transport* transport() const { return member::WaitTracker::Inner(transport_.get()); }
  // The same behind the wait tracker: its waits end when an eviction
  // preempts the epoch (the in-band checks after a step use it).
  transport::Transport* tracked_transport() const { return transport_.get(); }

 private:
  friend class BucketPipeline;
  friend class WholeStep;
  // Opens a step: enters an epoch or a plan barrier and fixes
  // the step number (next_step()). On failure the step is still open, failed:
  // its buckets go to their residuals (ExchangeBucket) and EndStep returns the
  // error; the step number is not spent.
  absl::Status BeginStep();
  // One bucket of the open step in three parts (BucketCall). PlanBucket reads only what the
  // open step fixed at BeginStep (plan, rules, step, rank, the step's
  // communicator) and writes only `call` and `slot`'s algorithm objects, so
  // it and PrepareBucket may run on another thread while ExchangeBucket runs
  // an earlier bucket of the same step (never concurrently with BeginStep or
  // EndStep, nor on a slot another call in flight uses). `grad` and `slot`
  // stay valid until the call is exchanged or abandoned.
  void PlanBucket(uint32_t bucket, std::span<const size_t> step_buckets,
                  std::span<const float> grad, BucketSlot* slot, BucketCall* call) const;
  // The call frame's local part (SparseAllreduce::PrepareCall): touches only
  // `call`, its slot and its gradient.
  static void PrepareBucket(BucketCall* call);
  // The messages of a planned (and usually prepared) bucket, in issue order:
  // the step's failure rules: after a failure in the step (or when it
  // failed to begin) the gradient is kept in slot->residual and the step's
  // first error returned. After a failure earlier in the
  // step a prepared call is abandoned (its residual holds grad + old
  // residual) and the step's first error returned; a failed preparation
  // fails the step as a failed exchange would.
  absl::Status ExchangeBucket(BucketCall* call, BucketOutcome* out);
  // Gives a planned bucket up unexchanged (a closing client): its gradient
  // joins its residual.
  static void AbandonBucket(BucketCall* call);
  // Closes the step: reports it (per bucket: algorithm, seconds, dense
  // probe), fills `out`'s step fields (not results/stats), and returns the
  // step's first error. A step whose buckets failed is spent (the next one
  // is step + 1).
  absl::Status EndStep(StepOutcome* out);
  bool step_open() const { return step_open_; }

  absl::Status EnterEpoch();
  absl::Status Connect(std::shared_ptr<const member::Plan> plan, uint64_t sync_sequence);
  absl::Status Barrier();
  absl::Status Rejoin();
  absl::Status Fail(absl::Status status);
  // Takes the agreed rules (from rank `from`); warns once per agreed value
  // about each field where this rank's own differs.
  void AdoptRules(const member::BucketRules& agreed, int from);
  // Every algorithm the plan names exists in this build.
  absl::Status CheckAlgorithms() const;
  // The newest held plan of base's epoch that may apply at `step` (base when
  // none is newer); *newest_epoch, if given, gets the newest epoch of any
  // held plan that may apply at `step`.
  std::shared_ptr<const member::Plan> Eligible(uint64_t step,
                                               std::shared_ptr<const member::Plan> base,
                                               uint64_t* newest_epoch = nullptr) const;
  collectives::AllreduceOptions Options(int bucket) const;
  // `s` with the peer this rank timed out waiting for (since `since`) named.
  absl::Status NameWait(absl::Status s, transport::Clock::time_point since) const;
  // The shadow probe of a call: call->probe on zeros of the bucket's size
  // (dense_probe) or on a copy of its gradient with a residual of zeros
  // (sparse_probe), under a call id no bucket of the step uses; its wall
  // time. The call's own residual is not touched.
  absl::Status TimeProbe(const BucketCall& call, double* seconds);
  void Report(uint64_t step);
  // A planned bucket of a failed step: its gradient joins its residual
  // (however far it got), and the step's error, named for it, is returned.
  absl::Status KeepCall(BucketCall* call) const;
  // Makes slot's algorithm objects for `name` and `epoch`, when they were
  // made for another (PlanBucket's, which may not touch the agent).
  // `layout` (null: flat) wraps them in the hierarchical exchange where
  // the algorithm may run across nodes.
  static absl::StatusOr<collectives::SparseAllreduce*> SlotAlgorithm(
      const std::string& name, uint32_t epoch, BucketSlot* slot, const catalog::NodeLayout* layout);
  // The epoch's node layout and whether it runs hierarchical (BeginStep,
  // once per epoch: the plan's members and the agreed rules fix both).
  void UpdateLayout();

  const AgentOptions options_;
  const uint64_t job_id_;
  member::ControlPlane* const control_;
  member::TransportProvider* const transports_;
  AgentMetrics* const metrics_;

  std::shared_ptr<const member::Plan> plan_;         // the agreed plan of the current epoch
  member::BucketRules rules_;                        // the agreed rules of the current epoch
  std::optional<member::BucketRules> warned_rules_;  // the agreed rules last warned about
  uint64_t rules_disagreements_ = 0;
  // Pending receives of the data plane, read by the heartbeat (hang diagnosis).
  const std::shared_ptr<member::WaitTracker> waits_ = std::make_shared<member::WaitTracker>();
  std::unique_ptr<transport::Transport> transport_;
  // The open step's communicator, fixed at BeginStep (PlanBucket reads it on
  // the client's selection thread); a failure moves the communicator to
  // retired_, which keeps it alive (aborted) until the step ends.
  transport::Transport* step_transport_ = nullptr;
  std::unique_ptr<transport::Transport> retired_;
  absl::Status begin_status_;  // BeginStep's result, fixed for the step
  // The first frame refused in the open step and its sender (CallContext::
  // blame); a failed step reports it.
  mutable collectives::wire::FrameBlame
      step_blame_;  // thread-safe; PlanBucket (const) hands it to calls
  // The open step (BeginStep .. EndStep).
  bool step_open_ = false;
  bool step_ran_ = false;     // a bucket ran (or failed) in it: EndStep spends the number
  absl::Status step_status_;  // its first error
  transport::Clock::time_point step_start_{};
  std::chrono::system_clock::time_point step_unix_start_{};
  double step_compute_s_ = 0;
  std::vector<member::StepReport::Bucket> step_buckets_;
  std::vector<collectives::CallStats> step_stats_;
  int rank_ = -1;
  uint64_t next_step_ = 0;
  uint64_t synced_at_ = ~uint64_t{0};  // the step the last agreement was made for
  uint32_t last_epoch_ = 0;            // the last epoch this agent ran (or failed) in
  bool need_rejoin_ = false;
  std::chrono::milliseconds lease_{10000};
  transport::Clock::time_point last_step_end_{};
  // This epoch's link probe (Plan::measure_links), sent with its reports.
  std::optional<member::LinkEstimate> link_;
  uint32_t link_epoch_ = 0;
  // The current epoch's node layout (from its plan's members) and mode.
  catalog::NodeLayout layout_;
  uint32_t layout_epoch_ = 0;
  bool hierarchical_ = false;
  std::string layout_line_;
};

}  // namespace gradex::pipeline

#endif  // GRADEX_PIPELINE_AGENT_H_
