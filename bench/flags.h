// Command-line flags of gradex-bench: parsing, validation and --help text.
#ifndef GRADEX_BENCH_FLAGS_H_
#define GRADEX_BENCH_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "catalog/catalog.h"
#include "catalog/node_layout.h"

namespace gradex::bench {

struct BenchFlags {
  std::string algo = "all";  // a name, a comma-separated list, or "all"
  int ranks = 4;
  uint64_t elements = 25'000'000;
  double density = 0.01;
  int teams = 0;  // 0: 2 when it divides ranks, else 1
  int iters = 5;
  int warmup = 2;
  std::string transport = "ucx";  // ucx | loopback
  uint64_t seed = 1;
  bool json = false;
  std::string json_out;         // also append the JSON lines to this file
  std::string dump_dir;         // empty: no dump
  bool threshold_reuse = true;  // off: every selection from scratch (same results)
  bool integer = false;         // integer-valued gradients: conservation must be exact
  int quantize_bits = 0;        // QSGD bits on dense phases (0 = off, 2, 4, 8)
  // --param NAME=VALUE (repeatable) and --quantize-bits: algorithm parameters
  // by catalog name; each algorithm gets those of its own catalog entry.
  catalog::ParamValues params;
  int64_t deadline_ms = 60'000;  // per call (every wait inside it)
  int64_t timeout_s = 1800;      // whole run; children are killed past it
  int64_t connect_timeout_ms = 30'000;
  std::string rank_wrapper;  // e.g. "ip netns exec gx%d", %d = rank
  bool quiet = false;        // no progress on stderr
  // Nodes: --ranks-per-node L groups consecutive ranks (node r / L, as
  // torchrun assigns them); --node-of-rank names each rank's node instead.
  // Either one, with more than one node of more than one rank each, runs the
  // hierarchical exchange unless --hierarchy off.
  int ranks_per_node = 1;
  std::vector<std::string> node_of_rank;  // empty, or one name per rank
  std::string hierarchy = "auto";         // auto | off
  bool help = false;

  // Hidden: set by the launcher for the rank processes it starts.
  int rank = -1;  // >= 0: this process is one rank of a ucx run
  std::string bootstrap_dir;
  int report_fd = -1;
  // Hidden fault injection (tests): rank `fault_rank` SIGKILLs itself
  // `fault_after_ms` after its transport is up (or after fault_call starts).
  int fault_rank = -1;
  int64_t fault_after_ms = 0;
  // >= 0: instead, die inside this call (0-based, warmup included) when
  // posting send number fault_sends + 1 of it.
  int fault_call = -1;
  int fault_sends = 1;
};

// Parses argv (argv[0] is skipped). Errors name the offending flag.
absl::StatusOr<BenchFlags> ParseFlags(int argc, char** argv);

// The --help text.
std::string HelpText();

// Each rank's node name: --node-of-rank as given, else "node<r / L>".
std::vector<std::string> NodeOfRank(const BenchFlags& flags);

// The node layout of the run (catalog/node_layout.h).
catalog::NodeLayout LayoutFor(const BenchFlags& flags);

// Why `algo` runs flat on this run's layout ("" when it runs hierarchical):
// --hierarchy off, a layout the hierarchy does not fit (catalog::FlatReason),
// or an algorithm that cannot be the inter-node stage (HierarchyExclusion).
std::string FlatReasonFor(const std::string& algo, const BenchFlags& flags);

// Resolves --algo against the registry names; "all" keeps registry order.
absl::StatusOr<std::vector<std::string>> ResolveAlgorithms(const std::string& algo,
                                                           const std::vector<std::string>& known);

// Teams used for `algo` (1 for algorithms without teams).
int TeamsFor(const std::string& algo, const BenchFlags& flags);

// Why `algo` cannot run with these flags (empty when it can), e.g. R-SAG with
// a team count that is not a power of two.
std::string SkipReason(const std::string& algo, const BenchFlags& flags);

}  // namespace gradex::bench

#endif  // GRADEX_BENCH_FLAGS_H_
