// What the agent needs of the coordinator, in plain C++: join with the UCX
// worker address, keep a lease, read the newest plan, report steps. The agent
// is written against this interface only; the gRPC implementation maps it onto
// proto/gradex/v1, and an in-memory fake serves multi-agent tests.
//
// Nothing here may block a step: LatestPlan() reads what a background watcher
// last received, and ReportStep() enqueues or drops.
#ifndef GRADEX_MEMBER_CONTROL_PLANE_H_
#define GRADEX_MEMBER_CONTROL_PLANE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "catalog/catalog.h"
#include "transport/transport.h"

namespace gradex::member {

struct PlanMember {
  int rank = 0;             // dense 0..P-1 in this epoch
  std::string agent_id;     // stable across epochs and coordinator restarts
  std::string ucx_address;  // opaque UCX worker address published at join
  bool server = false;      // a parameter server's member (role SERVER)
  // Its node (the host it joined with, <= 255 bytes): members with equal
  // nodes share one (catalog::LayoutOf).
  std::string node;
};

// A parameter-server job's epoch (Plan.ps, checked by ToPsPlan: every rank,
// slot and size below is within the plan's own bounds).
struct PsPlan {
  uint32_t shards = 0;
  std::vector<int> shard_rank;        // per shard: the SERVER rank holding it
  std::vector<uint32_t> layer_sizes;  // the model
  std::vector<int> worker_slot;       // per rank: the worker's id at the servers, -1 for a server
  uint32_t worker_slots = 0;          // worker ids are 0 .. worker_slots-1
  uint64_t max_staleness = 0;         // 0: unbounded
  std::chrono::milliseconds snapshot_interval{0};  // 0: never
};

// One version of the job's plan. Values every rank must agree on (epoch and
// members, algorithm, density, teams, the period, deadline, parameters)
// are switched only at plan barriers (steps that are multiples of tau), to
// values the members agree on in-band (epoch_sync.h); the B-SAG k' is per
// rank and applied as soon as it arrives. A new epoch replacing a broken one
// is entered at once.
struct Plan {
  uint64_t version = 0;             // strictly increasing per job
  uint32_t epoch = 0;               // membership generation; every frame carries it
  uint64_t effective_step = 0;      // first step the barrier values may apply to
  std::vector<PlanMember> members;  // indexed by rank
  std::string algorithm{catalog::DefaultAlgorithm()};
  double density = 0.01;
  int teams = 1;
  // B-SAG k' per bucket and team position (rank % (P / teams)); missing or
  // 0 = the algorithm's own step controller.
  std::vector<std::vector<size_t>> kprime;
  int tau = 64;  // plan barrier period, in steps
  // The algorithm's parameters by catalog name (e.g. Ok-Topk's "oktopk_tau"),
  // from the job config, checked against the catalog entry; absent ones take
  // the entry's default where the algorithm reads them.
  catalog::ParamValues params;
  std::chrono::milliseconds step_deadline{10000};  // budget of one call
  // Entering the epoch (connect + the entry agreement) ends this long after
  // it starts; the coordinator evicts a member not entering by then. 0: the
  // agent's own timeouts.
  std::chrono::milliseconds entry_timeout{0};
  // Probe the links at each epoch's start (link_probe.h) and report them. A
  // job constant (the coordinator's auto_teams), so every rank of an epoch
  // probes at the same point.
  bool measure_links = false;
  // Per bucket (its index in the step, in issue order): the algorithm to run,
  // where it differs from `algorithm` ("" or missing: `algorithm`). Set by
  // the coordinator's bucket controller ("auto", the dense fallback when a
  // sparse exchange loses to a dense one); agreed at plan barriers.
  std::vector<std::string> bucket_algorithms;
  // Parameter-server jobs: the shards and worker slots of this epoch.
  std::optional<PsPlan> ps;

  int world() const { return static_cast<int>(members.size()); }
  // This agent's rank in the plan, or -1 when it is not a member.
  int RankOf(const std::string& agent_id) const;
};

struct JoinRequest {
  std::string job;
  std::string token;
  std::string agent_id;  // the same on a re-join, so the coordinator can match it
  std::string host;
  int local_rank = 0;
  std::string device;
  std::string ucx_address;
  std::string ucx_version;     // "MAJOR.MINOR" of the agent's UCX
  std::string ucx_transports;  // its UCX_TLS list ("all": unrestricted)
  uint32_t last_epoch = 0;     // 0 on the first join; the last epoch run on a re-join
  int last_rank = -1;          // this agent's rank in last_epoch
  int last_world_size = 0;     // P of last_epoch
  uint64_t next_step = 0;      // the step this agent runs next
  bool server = false;         // joins as a parameter server (role SERVER)
};

// The job config's values every plan takes its algorithm, density, team
// count and parameters from (JoinResponse.plan_config), known at the join:
// a trainer compares what it asked for with them before its first step.
struct JobPlanConfig {
  std::string algorithm;  // "auto" or a catalog name
  double density = 0;
  int teams = 1;
  bool auto_teams = false;  // the coordinator chooses the team count
  catalog::ParamValues params;
};

struct JoinReply {
  std::string member_id;
  std::chrono::milliseconds lease{10000};
  // Absent when the coordinator predates it.
  std::optional<JobPlanConfig> plan_config;
};

// What one step did, for the coordinator's controllers (B-SAG k', COVAP CCR,
// hang diagnosis). Sent asynchronously; may be dropped.
// The α-β cost of one message on this agent's links (time = alpha + beta *
// bytes), from the probe at its epoch's start (StepReport.link).
struct LinkEstimate {
  double alpha_s = 0;          // per message
  double beta_s_per_byte = 0;  // per byte
  uint32_t samples = 0;        // timed exchanges behind each median
};

struct StepReport {
  uint32_t epoch = 0;
  uint64_t step = 0;
  int rank = 0;
  bool ok = true;
  std::string error;  // when !ok
  // When !ok: the rank (in `epoch`) that sent a frame this member refused
  // in the step, and why; -1: nobody blamed.
  int blamed_rank = -1;
  std::string blame;
  double total_s = 0, selection_s = 0, communication_s = 0, reduction_s = 0;
  double compute_s = 0;          // time outside the exchange since the previous step
  size_t post_gather_count = 0;  // B-SAG u, summed over buckets
  size_t kprime_used = 0;
  uint64_t sent_bytes = 0, recv_bytes = 0;
  size_t result_nnz = 0;
  // The exchange's start and end on this host's clock (ns since the Unix
  // epoch), for COVAP's profiler, which aligns ranks at the end.
  int64_t comm_start_unix_ns = 0, comm_end_unix_ns = 0;
  struct Bucket {
    size_t elements = 0;
    int team_position = 0;
    size_t kprime_used = 0;
    size_t post_gather_count = 0;
    size_t result_nnz = 0;
    std::string algorithm;     // what ran (the plan's, or the bucket's own)
    double seconds = 0;        // the bucket's exchange, wall
    bool dense_probe = false;  // a dense exchange run to time it against the sparse one
  };
  std::vector<Bucket> buckets;
  // This agent's link probe of the step's epoch, when measured.
  std::optional<LinkEstimate> link;
};

// Where this agent's current step is blocked, for the coordinator's hang
// diagnosis (HeartbeatRequest.waiting): the oldest receive still pending.
struct WaitInfo {
  uint32_t epoch = 0;  // the epoch of the step that waits
  uint64_t step = 0;   // the agent's step (not the per-bucket call step)
  int peer = -1;       // the rank whose message it waits for
  std::chrono::milliseconds waited{0};
};

// Read by the heartbeat thread while the data plane runs: must not block on
// the data plane (a short mutex at most).
class WaitSource {
 public:
  virtual ~WaitSource() = default;
  // The oldest pending receive of the current step if it has waited at least
  // `at_least`, else nothing.
  virtual std::optional<WaitInfo> OldestWait(std::chrono::milliseconds at_least) const = 0;
  // The epoch whose communicator the agent runs (0 before the first).
  virtual uint32_t running_epoch() const = 0;
};

class ControlPlane {
 public:
  virtual ~ControlPlane() = default;

  // Registers (or re-registers) this agent and starts keeping its lease and
  // watching the plan in the background. Bounded by `deadline`.
  virtual absl::StatusOr<JoinReply> Join(const JoinRequest& request,
                                         transport::Deadline deadline) = 0;
  // Renews the lease now (implementations also do it by themselves).
  virtual absl::Status Heartbeat(transport::Deadline deadline) = 0;
  // Leaves the job; stops the background work.
  virtual absl::Status Leave(transport::Deadline deadline) = 0;

  // The job's plan config as the last successful Join's reply gave it;
  // absent before one, or when the coordinator does not send it.
  virtual std::optional<JobPlanConfig> JoinedPlanConfig() const { return std::nullopt; }

  // Newest plan received, or null before the first. Never blocks on the
  // network (a mutex and a pointer copy).
  virtual std::shared_ptr<const Plan> LatestPlan() const = 0;
  // An earlier version still held (the last few are kept), or null.
  virtual std::shared_ptr<const Plan> PlanVersion(uint64_t version) const = 0;

  // Enqueues a report for the background sender. Never blocks: when the queue
  // is full the report is dropped, counted, and false returned.
  virtual bool ReportStep(StepReport report) = 0;
  virtual uint64_t report_drops() const = 0;

  // Heartbeats carry the source's running epoch and current wait from now on.
  // Implementations that do not heartbeat may ignore it.
  virtual void SetWaitSource(std::shared_ptr<const WaitSource> /*source*/) {}
};

}  // namespace gradex::member

#endif  // GRADEX_MEMBER_CONTROL_PLANE_H_
