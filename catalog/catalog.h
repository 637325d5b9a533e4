// The algorithm catalog: what every layer may know about an algorithm without
// linking its schedule. Per algorithm: a stable id (carried in data-plane
// frames), the name of docs/design.md, a one-line description, traits and its
// parameters as data, and its Table 1 cost row (the Ok-Topk paper's Table 1;
// SparDL's rows as reconstructed in docs/design.md). The coordinator, the
// simulator, bench and the agents all link this library; the schedules live
// in collectives/ and register their factories under these names.
// Dependency-free (absl only): no transport, no kernels, no protobuf.
#ifndef GRADEX_CATALOG_CATALOG_H_
#define GRADEX_CATALOG_CATALOG_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace gradex::catalog {

// Algorithm parameters by catalog name: what a job config sets, the plan and
// the agents' barrier carry and the algorithm reads (ParamOr). Every value is
// a double; kInt parameters hold integers (CheckParam).
using ParamValues = std::map<std::string, double, std::less<>>;

// What the invariant tests, the coordinator and the simulator may expect of
// an algorithm.
struct Traits {
  bool uses_teams = false;          // the teams parameter is honoured
  bool teams_power_of_two = false;  // ... and must be a power of two
  bool dense = false;               // sends the whole gradient (nothing is discarded)
  // Integer gradients give exact sums (no scaling of discards, no quantisation).
  bool exact_on_integers = true;
  // At density 1 the result equals dense-ring's (integer gradients), with
  // the parameters `dense_params` (COVAP: covap_interval 1, every part sent).
  bool equals_dense_at_density_one = true;
  // (Pairs rather than a ParamValues map: GCC 12 warns on copies of the
  // catalog's list when its elements hold a std::map.)
  std::vector<std::pair<std::string, double>> dense_params;
  // Measured bytes may fall this fraction below the volume model (never above
  // it): sums that cancel are not sent; data-dependent selections state their own.
  double volume_slack = 0.03;
  // Every rank takes part in every call and the call ends together (no
  // rank runs ahead by a step).
  bool synchronous = true;
  // Its per-block pre-selection count k' is steered by the B-SAG controller
  // (the coordinator may coordinate it).
  bool kprime_controlled = false;
  // Its region boundaries may be agreed by the coordinator (Ok-Topk).
  bool coordinated_regions = false;
  // Sends each bucket in parts over an interval of steps that the
  // coordinator's CCR profiler sets (COVAP's covap_interval): the profiler
  // runs while it is in play and counts its steps, their time scaled by the
  // interval, as the uncompressed exchange.
  bool ccr_profiled = false;
  // Not an allreduce: workers push to and pull from server shards
  // (ps/dgs_*.h, DGS). It has no schedule in the allreduce
  // registry, no Table 1 row, is never a bucket's algorithm and is never
  // chosen by "auto"; a job runs it as a parameter-server job.
  bool parameter_server = false;
};

enum class ParamType { kInt, kDouble };

// One parameter the algorithm reads, with its default and valid range
// (inclusive). `allowed`, when not empty, lists the only valid values.
struct ParamSpec {
  std::string name;
  ParamType type = ParamType::kInt;
  double default_value = 0;
  double min = 0;
  double max = 0;
  std::vector<double> allowed;
  std::string description;
};

// Inputs of a Table 1 row: P ranks, n elements at `density`, the SAG team
// count and, for B-SAG, k' as a fraction of k_block (0: the row's range).
struct CostInputs {
  int world = 1;
  uint64_t elements = 0;
  double density = 0.01;
  int teams = 1;
  double kprime_ratio = 0;
  int covap_interval = 0;  // COVAP's I (0: its catalog default, 3)
};

// time = α · latency + β · bytes, where latency counts messages on the
// critical path and bytes are bytes on it (8 per COO entry, 4 per dense
// element; frame headers excluded). Data-dependent rows give a range [lo, hi].
struct CostRange {
  double latency_lo = 0, latency_hi = 0;  // messages (α multipliers)
  double bytes_lo = 0, bytes_hi = 0;      // bytes (β multipliers)
  std::string formula;                    // the row, in words
};
using CostFn = CostRange (*)(const CostInputs&);

// What one rank of the simulator (P ranks in one process) holds beyond its
// gradient, residual and the residual's copy, so that a run at scale picks an
// N that fits its memory budget (bench/sim/memory_plan.h). The defaults, an
// all-gather of every rank's selection, are the safe guess for an algorithm
// not measured yet.
struct MemoryModel {
  // Holds a dense result and frames of it although it is not dense.
  bool dense_result = false;
  // COO entries a sparse algorithm gathers per rank: (gather_k + gather_pk·P)·k.
  double gather_k = 0;
  double gather_pk = 1;
  // Bytes per rank whatever N: per_world·P + per_world_pair·P(P-1).
  double per_world_bytes = 0;
  double per_world_pair_bytes = 0;
};

struct AlgorithmSpec {
  uint16_t id = 0;  // stable, never reused; 0 is not an algorithm
  std::string name;
  std::string description;
  Traits traits;
  std::vector<ParamSpec> params;
  CostFn table1_cost = nullptr;  // null: no Table 1 row
  MemoryModel memory;
};

// Adds an algorithm (the built-in ones are present from the start). Refused
// when the id is 0 or the id or name is taken. Safe from static initialisers.
absl::Status Register(AlgorithmSpec spec);

namespace internal {
bool RegisterOrDie(AlgorithmSpec spec);
}  // namespace internal

#define GRADEX_CATALOG_CONCAT2(a, b) a##b
#define GRADEX_CATALOG_CONCAT(a, b) GRADEX_CATALOG_CONCAT2(a, b)
// At namespace scope, before the algorithm's GRADEX_REGISTER_ALGORITHM: adds
// an entry at start-up (a clash aborts: a programming error).
#define GRADEX_CATALOG_ENTRY(...)                                                             \
  [[maybe_unused]] static const bool GRADEX_CATALOG_CONCAT(gradex_catalog_entry_, __LINE__) = \
      ::gradex::catalog::internal::RegisterOrDie(__VA_ARGS__)

// Null when unknown. Pointers stay valid for the life of the process.
const AlgorithmSpec* Find(std::string_view name);
const AlgorithmSpec* FindId(uint16_t id);

// The traits of `name`; defaults when the catalog lacks it.
Traits TraitsOf(std::string_view name);
// The algorithm with teams to run on a team count that is (`power_of_two`) or
// is not a power of two: one that needs a power of two when asked and one
// exists, else one that runs on any count. Empty when none has teams.
std::string TeamAlgorithmFor(bool power_of_two);

// The algorithm a job runs when its configuration names none.
std::string_view DefaultAlgorithm();
// The algorithm whose sum every other is checked against (conservation,
// equality at density 1): dense, exact on integers, no options.
std::string_view ReferenceSumAlgorithm();
// The parameter-server entry (Traits::parameter_server) that has a server
// role: the algorithm a parameter-server job names.
std::string_view ParameterServerAlgorithm();

// Every algorithm, by id.
std::vector<const AlgorithmSpec*> All();
std::vector<std::string> Names();
// "a, b, c": for error messages that list the known names.
std::string NameList();

// Bounds on what a plan or a barrier message may carry.
inline constexpr size_t kMaxParams = 32;
// The most server shards a parameter-server model may be split into (a shard
// is at least one element of a layer; 4096 servers is far beyond any PS job):
// the coordinator's assignment and the DGS data plane bound by this one.
inline constexpr uint32_t kMaxParameterServerShards = 4096;
inline constexpr size_t kMaxParamNameBytes = 64;

// The parameter `name` of `spec`, or null.
const ParamSpec* FindParam(const AlgorithmSpec& spec, std::string_view name);
// OK when `value` is valid for `param`; else INVALID_ARGUMENT naming it.
absl::Status CheckParam(const ParamSpec& param, double value);
// OK when every entry of `values` is a parameter of `spec` with a valid
// value; else INVALID_ARGUMENT naming the parameter (and, for an unknown one,
// listing the algorithm's parameters).
absl::Status CheckParams(const AlgorithmSpec& spec, const ParamValues& values);
// `values[name]` when present, else the catalog default of `name` in `spec`
// (0 when `spec` is null or lacks it).
double ParamOr(const AlgorithmSpec* spec, const ParamValues& values, std::string_view name);

}  // namespace gradex::catalog

#endif  // GRADEX_CATALOG_CATALOG_H_
