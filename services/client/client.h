// gradex::client::Client: the trainer-facing API (docs/design.md, services/client).
// It embeds the agent runtime in the trainer's process: joins the
// coordinator (or, on rank 0 with none configured, starts one in-process and
// publishes its address and a fresh token through the trainer's rendezvous
// store), owns the UCX worker, and runs bucket exchanges on its own progress
// thread in the order the trainer issues them, selecting the next bucket on a
// second thread meanwhile.
//
// Residuals are kept per parameter span (ParamSpan::key), not per bucket
// index, so they survive DDP's bucket rebuild after the first iteration; a
// bucket whose layout is new gathers the residuals of its spans from wherever
// they were kept (nothing is lost or counted twice).
#ifndef GRADEX_SERVICES_CLIENT_CLIENT_H_
#define GRADEX_SERVICES_CLIENT_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "catalog/catalog.h"
#include "pipeline/bucket_pipeline.h"

namespace gradex::client {

// The warm-up of algorithm "auto" (start_iter not given): dense steps in
// whose odd steps each bucket's planned sparse exchange is also timed, so the
// coordinator chooses the bucket's side before it ever runs sparse (a switch
// from sparse to dense in mid-training costs accuracy; docs/measurements.md).
// 384 = 6 plan barriers of the default 64 steps: the auto choice from the link
// probes applies at step 128 (the plan lead), its sparse samples fill two
// windows of 8 on odd steps by about step 160, and that decision applies at
// the barrier after 160 + 128, before step 384 with one window to spare.
inline constexpr uint64_t kAutoWarmupSteps = 384;

struct ClientOptions {
  std::string job = "gradex";
  int rank = 0;        // the trainer's rank (RANK): 0 embeds the coordinator when none is given
  int world_size = 1;  // WORLD_SIZE
  int local_rank = 0;  // LOCAL_RANK
  // host:port of an existing coordinator (GRADEX_COORDINATOR); empty: rank 0
  // starts one in-process and publishes it through the Rendezvous.
  std::string coordinator;
  std::string token;  // GRADEX_TOKEN, or the contents of GRADEX_TOKEN_FILE
  // The address other ranks reach the embedded coordinator at (default:
  // GRADEX_COORDINATOR_HOST, else MASTER_ADDR, else 127.0.0.1).
  std::string advertise_host;
  std::string algorithm = "auto";  // a catalog name, or "auto" (per bucket, cost model)
  double density = 0.01;
  int teams = 0;  // 0: the embedded coordinator's default (1; its auto_teams is not enabled)
  // The per-bucket rules (start_iter .. dense_probe_period): every rank
  // applies rank 0's (agreed in-band at each epoch's entry); a rank given
  // other values warns once per field. start_iter, dense_probe_period <=
  // 2^32; min_compression_rate <= 2^30.
  // Steps [0, start_iter) are dense (PowerSGD's start_iter). Not given, the
  // C ABI and Python take kAutoWarmupSteps under "auto" with dense probes
  // on (ApplyDependentDefaults).
  uint64_t start_iter = 0;
  double min_compression_rate = 2.0;  // buckets where sparse sends less than this factor stay dense
  // Every this many steps (from start_iter) each sparse bucket's dense
  // exchange is timed, on zeros of its size beside its own exchange (the
  // training never sees it), against its sparse exchange (the bucket
  // controller's "never slower than dense"); 0: never.
  uint64_t dense_probe_period = 50;
  // The largest bucket (elements); bounds what a peer may announce to the
  // data plane (UcxOptions.max_message_bytes). Larger buckets are refused.
  size_t max_bucket_elements = size_t{1} << 28;
  catalog::ParamValues params;               // algorithm parameters by catalog name
  std::chrono::milliseconds timeout{60000};  // joining, and every bucket's exchange
  bool mean = true;  // results are the mean over ranks (DDP); false: the sum
  // GRADEX_METRICS_PORT: -1 none, 0 any free port, else the base port of the
  // node's ranks: this process binds metrics_port + local_rank
  // (MetricsPortOf), so torchrun's ranks of one pod each serve their own.
  int metrics_port = -1;
  // GRADEX_METRICS_ADDR: the address the metrics endpoint binds (a pod's
  // scraper needs 0.0.0.0; the default keeps it on loopback).
  std::string metrics_address = "127.0.0.1";
  // TLS to a coordinator given by address (PEM contents; ApplyEnvironment
  // reads them from GRADEX_TLS_CA_FILE, GRADEX_TLS_CERT_FILE and
  // GRADEX_TLS_KEY_FILE): the CA that signed its certificate, and a client
  // certificate and key for mutual TLS. Empty CA: plaintext.
  std::string tls_ca, tls_client_cert, tls_client_key;
  std::string tls_server_name;  // GRADEX_TLS_SERVER_NAME: when the address is not the cert's name
  std::string data_ip;          // GRADEX_DATA_IP: the data plane's interface
  std::string timeline_path;    // GRADEX_TIMELINE: Chrome-trace JSON of every step's phases
  // NaN or infinite gradient values. Refuse (default): they are exchanged as
  // 0, so no peer's result and no residual is poisoned, `data` receives the
  // (finite) result like every rank's, and the bucket ends INVALID_ARGUMENT
  // naming how many there were and where; a NaN or Inf a peer sends is then
  // a bad frame, and the coordinator evicts that peer. Pass through: summed
  // like any value (every rank's result and this rank's residual become
  // non-finite). Every rank runs rank 0's choice (agreed in-band, as the
  // per-bucket rules; a rank given the other warns once).
  bool refuse_nonfinite = true;
  // "auto": the hierarchical exchange (dense inside a node, sparse across
  // nodes) where the epoch has several nodes of as many ranks each; "off":
  // flat. Agreed in-band: rank 0's holds (GRADEX_HIERARCHY).
  std::string hierarchy = "auto";
  // This rank's node (ranks on one node share its fabric); empty: the host
  // name (GRADEX_NODE).
  std::string node;
  // Selection of bucket b+1 overlaps the exchange of bucket b (on a second
  // thread), within a step (GRADEX_PIPELINE=0 turns it off: each bucket is
  // selected after the previous one's exchange, as a comparison baseline).
  bool pipeline = true;
  // DGC's momentum correction (Lin et al., ICLR 2018, Alg. 1): 0 (off) or the
  // optimizer's momentum m in [0, 1). Each rank keeps a velocity per
  // parameter span, u <- m*u + g, and exchanges u instead of g; the result is
  // then the update direction (plain SGD with the same lr).
  double momentum_correction = 0;
  // With momentum_correction, after a sparse exchange (fewer than half of the
  // result's entries non-zero) the velocity of every entry the result applied
  // restarts from 0 (DGC's momentum factor masking).
  bool factor_masking = true;
  // algorithm, density, teams and params are the plan's (a coordinator's job
  // config, or rank 0's options when rank 0 embeds it). A rank that asks for
  // other values fails Create (INVALID_ARGUMENT naming each option, both
  // values and where the plan's came from); true: it runs the plan's values
  // and warns once per option (gradex_client_plan_overrides_total{option}).
  bool allow_plan_override = false;
  // The options given explicitly (keyword, C key, environment variable) and
  // where: option name -> e.g. "keyword density". The option table's setters
  // fill it; a C++ caller's field that differs from its default counts as
  // given too (option_table.h, Asked).
  std::map<std::string, std::string> given;
};
// Every option's name, range, environment variable, C key and Python
// keyword: option_table.h (and the README's table).

// Fills what the environment says (GRADEX_*, GRADEX_JOB, RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR); a malformed value is INVALID_ARGUMENT naming the variable.
absl::Status ApplyEnvironment(ClientOptions* options);

// The port this process's metrics endpoint binds: -1 (none) and 0 (any free
// port) as given, else metrics_port + local_rank: one port per rank of a
// node, each serving that process's own registry.
int MetricsPortOf(const ClientOptions& o);
// metrics_port is -1..65535 and, as a base, metrics_port + local_rank fits
// in a port; the error names the variables (INVALID_ARGUMENT).
absl::Status CheckMetricsPort(const ClientOptions& o);

// The trainer's own rendezvous (torch's c10d store): rank 0 sets, the others
// get (blocking up to their timeout).
struct Rendezvous {
  std::function<absl::Status(const std::string& key, const std::string& value)> set;
  std::function<absl::StatusOr<std::string>(const std::string& key)> get;
};

// One parameter's slice of a bucket, in bucket order, and where a bucket's
// memory is: the bucket pipeline's (pipeline/bucket_pipeline.h).
using ParamSpan = pipeline::ParamSpan;
using Memory = pipeline::Memory;

// Per bucket layout, for stats(): what ran and what it cost, cumulative.
struct BucketStats {
  std::vector<ParamSpan> spans;
  size_t elements = 0;
  std::string algorithm;  // last call's (a catalog name; dense ones when it fell back)
  double density = 0;
  uint64_t calls = 0, dense_calls = 0, fallback_switches = 0;
  uint64_t sent_bytes = 0, recv_bytes = 0;  // last call
  double last_s = 0;                        // last exchange, wall
  double sparse_s = 0;                      // median of recent sparse exchanges (0: none yet)
  double dense_s = 0;                       // median of recent dense exchanges (0: none yet)
  double residual_norm = 0;                 // L2 of the bucket's residual after the last call
  // Local top-k selections that reused the bucket's last threshold: finished
  // among one pass's candidates (hits) or not (misses: a full select ran).
  uint64_t threshold_reuse_hits = 0, threshold_reuse_misses = 0;
  // How the last call's data reached the exchange ("host"; "device
  // selection": a Memory::kDevice bucket selected on its GPU, where its
  // residual lives, only O(k) entries crossing PCIe; "whole-bucket staging":
  // copied whole to pinned host memory and back) and the bytes it copied
  // each way over PCIe.
  std::string device_path = "host";
  uint64_t device_to_host_bytes = 0, host_to_device_bytes = 0;
  uint64_t device_waits = 0;  // last call: times the host waited for the device
  // Last call: whole-device synchronisations and allocations outside
  // gradex's device pool (pinned staging growing); both 0 in a steady step.
  uint64_t device_syncs = 0, device_allocations = 0;
  // Bytes gradex's private device pool held at the last call's end (outside
  // torch's caching allocator: the residuals, velocities and step scratch of
  // device buckets; at most half a GPU's memory; given back at close()).
  uint64_t device_pool_bytes = 0;
  // How the last call exchanged: "hierarchical (2 nodes x 4 ranks)" (dense
  // inside the node, sparse across nodes) or "flat (<why>)".
  std::string exchange;
  // Last call, hierarchical only (0 when flat): bytes this rank sent and
  // wall seconds inside its node and across nodes.
  uint64_t intra_node_bytes = 0, inter_node_bytes = 0;
  double intra_node_s = 0, inter_node_s = 0;
};

class Client {
 public:
  // Joins (or starts and joins) the coordinator within options.timeout; a
  // wrong token or an unreachable coordinator is a clear error. `device`
  // (outlives the client; null: device::DefaultBackend(), CUDA where built
  // with it) works on Memory::kDevice buckets; tests pass a
  // device::HostBackend.
  static absl::StatusOr<std::unique_ptr<Client>> Create(ClientOptions options,
                                                        Rendezvous rendezvous = {},
                                                        device::Backend* device = nullptr);
  virtual ~Client() = default;

  using Done = std::function<void(absl::Status)>;
  // Queues one bucket's exchange; `done` runs on the progress thread when it
  // ends. On success `data` holds the mean (or sum) over ranks; on failure
  // `data` is unchanged and the bucket's gradient is kept in its residual.
  // `data` must stay valid until `done`. `last_in_step` ends the training
  // step (plan barriers, reports and COVAP count steps). Buckets run in the
  // order issued; a step's buckets after a failed one fail too (their
  // gradients also go to the residuals). Non-finite gradient values: see
  // ClientOptions::refuse_nonfinite. `stream` (a cudaStream_t; 0: none):
  // the CUDA stream a device bucket was written on when it is not the
  // legacy default stream (which gradex's own work follows anyway): gradex
  // reads the bucket once that stream has passed this call, and the caller
  // is not blocked.
  virtual void AllreduceAsync(std::vector<ParamSpan> spans, std::span<float> data, Memory memory,
                              bool last_in_step, Done done, uintptr_t stream = 0) = 0;
  // Convenience: one span keyed `bucket`, host memory.
  std::future<absl::Status> AllreduceAsync(uint64_t bucket, std::span<float> data,
                                           bool last_in_step = true);
  // Waits (up to the timeout) until every queued bucket has ended.
  // Flush and Close from a `done` callback are FAILED_PRECONDITION (that
  // thread is the one they would wait for).
  virtual absl::Status Flush() = 0;

  virtual std::vector<BucketStats> Stats() const = 0;
  virtual int rank() const = 0;  // gradex's rank in the current epoch (-1 before the first)
  virtual int world_size() const = 0;
  virtual uint64_t step() const = 0;            // the next training step
  virtual std::string coordinator() const = 0;  // host:port in use

  // Residuals (by span key) and step counter, for checkpoints: call between
  // steps (FAILED_PRECONDITION while a step's buckets are in flight).
  // LoadState replaces every residual; a malformed blob is INVALID_ARGUMENT
  // and changes nothing. The step is restored when loaded before the first
  // exchange (every rank loads the same checkpoint; ranks agree on the
  // largest step at the epoch's start); later, the running step is kept.
  virtual absl::StatusOr<std::string> SaveState() const = 0;
  virtual absl::Status LoadState(std::string_view state) = 0;

  // Leaves the job; queued buckets fail with CANCELLED (their gradients go
  // to their residuals, so SaveState still sees them). The bucket in
  // progress ends first (bounded by the timeout). On the rank that runs the
  // embedded coordinator, it waits (up to the timeout, at most 5 s) for the
  // other ranks to leave before stopping it. Idempotent.
  virtual absl::Status Close() = 0;
};

}  // namespace gradex::client

#endif  // GRADEX_SERVICES_CLIENT_CLIENT_H_
