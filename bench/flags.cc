// Not absl::flags, on purpose: absl flag names are C++ identifiers, so it
// cannot accept the hyphenated names this command line has always had (the
// chart, scripts, docs and tests pass them), and its parser exits 1 and
// takes --json=yes, where this one exits 2 naming the flag and its range.
#include "bench/flags.h"

#include <charconv>
#include <cmath>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "catalog/catalog.h"
#include "collectives/algorithms/hierarchical.h"

namespace gradex::bench {
namespace {

absl::Status Bad(absl::string_view flag, absl::string_view value, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("bad value '", value, "' for --", flag, ": ", why));
}

absl::Status ParseInt(absl::string_view flag, absl::string_view v, int64_t lo, int64_t hi,
                      int64_t* out) {
  int64_t x = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size()) return Bad(flag, v, "not an integer");
  if (x < lo || x > hi) return Bad(flag, v, absl::StrCat("must be in [", lo, ", ", hi, "]"));
  *out = x;
  return absl::OkStatus();
}

absl::Status ParseU64(absl::string_view flag, absl::string_view v, uint64_t* out) {
  uint64_t x = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size() || v.empty()) {
    return Bad(flag, v, "not a non-negative integer");
  }
  *out = x;
  return absl::OkStatus();
}

absl::Status ParseDouble(absl::string_view flag, absl::string_view v, double* out) {
  // std::from_chars for double is in libstdc++ 11+, which Debian 12 has.
  double x = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size() || !std::isfinite(x)) {
    return Bad(flag, v, "not a number");
  }
  *out = x;
  return absl::OkStatus();
}

bool IsPowerOfTwo(int x) { return x > 0 && (x & (x - 1)) == 0; }

}  // namespace

std::string HelpText() {
  return R"(gradex-bench: runs gradex's sparse allreduce algorithms on synthetic gradients
across P ranks and checks their invariants (like nccl-tests, for sparse exchange).

Usage: gradex-bench [flags]

  --algo NAME|LIST|all  algorithm(s) to run: a registered name, a comma-separated
                        list, or 'all' (every registered name). Default: all
  --ranks P             number of ranks (processes for ucx, threads for loopback).
                        Default: 4
  --elements N          gradient length in float32 elements (1 .. 2^32-1).
                        Default: 25000000
  --density D           fraction of elements each algorithm keeps, (0, 1].
                        Default: 0.01
  --teams T             team count of spardl-rsag / spardl-bsag; must divide P
                        (rsag also needs a power of two, otherwise it is skipped
                        with a note). Default: 2 when it divides P, else 1
  --iters I             timed calls per algorithm (>= 1). Default: 5
  --warmup W            untimed calls before them (>= 0). Default: 2
  --transport ucx|loopback
                        ucx: P rank processes on this machine over UCX (honours
                        UCX_TLS, UCX_NET_DEVICES and every other UCX_* variable);
                        loopback: P threads in this process. Default: ucx
  --seed S              gradient seed; gradients depend on (seed, rank,
                        iteration) only, so runs are reproducible. Default: 1
  --integer             integer-valued gradients (conservation is then exact)
  --no-threshold-reuse  the top-k local parts select from scratch every call
                        instead of from the bucket's last threshold (the same
                        results; for timing the difference)
  --quantize-bits B     QSGD stochastic quantization of the dense phases (SparCML
                        dsar-split's all-gather, topkdsa's dense slices) at B bits
                        per value: 0 (off), 2, 4 or 8; the error stays in the
                        quantizing rank's residual. Default: 0
  --param NAME=VALUE    an algorithm parameter by catalog name (repeatable), e.g.
                        --param oktopk_tau=8; each algorithm gets those its
                        catalog entry has, checked against its range
  --json                one JSON object per algorithm per line on stdout instead
                        of the table: algo, ranks, teams, elements, density,
                        iters, median_s, p90_s, sent_bytes_per_rank,
                        recv_bytes_per_rank, result_nnz, consistent,
                        conservation_max_abs_err, algbw_gbps, busbw_gbps, and
                        details ({name: value}: the algorithm's own, e.g. B-SAG's
                        kprime_used) when the algorithm reports any
  --json-out FILE       also append the JSON lines to FILE (with the table on
                        stdout, e.g. for scripts that want both)
  --dump DIR            write the last iteration as raw little-endian float32
                        files of N elements: rank{r}_input.f32,
                        rank{r}_residual_in.f32, rank{r}_residual_out.f32,
                        rank{r}_result.f32 (result as dense); in DIR/<algo>/
                        when several algorithms run
  --deadline-ms MS      deadline of every call (and of every wait in it); a rank
                        that dies makes the survivors fail by then. Default: 60000
  --timeout-s S         deadline of the whole run: rank processes still running
                        then are killed and named. Default: 1800
  --connect-timeout-ms MS
                        UCX bootstrap + wire-up deadline. Default: 30000
  --rank-wrapper CMD    ucx only: prefix of each rank's command line, '%d'
                        replaced by the rank and '%n' by its node's index (nodes
                        numbered by their lowest rank), e.g. 'ip netns exec gx%d'
                        to run each rank in its own network namespace, or
                        'ip netns exec node%n' to run each node's ranks in one
  --ranks-per-node L    ranks on each node: rank r is on node r / L (consecutive
                        ranks share a node, as torchrun assigns them); with more
                        than one node the exchange runs hierarchical: a dense
                        ring reduce-scatter inside each node, the algorithm on
                        each 1/L shard across the nodes (density applies to the
                        shard), an all-gather inside the node. L must divide P.
                        Default: 1 (one rank a node: the flat exchange)
  --node-of-rank LIST   each rank's node by name, comma-separated, P names in
                        rank order (e.g. a,a,b,b), instead of --ranks-per-node;
                        equal names share a node. For ranks that run apart
                        (--rank-wrapper), every rank process gets the same list
  --hierarchy auto|off  auto: hierarchical where the layout has more than one
                        node, more than one rank a node and the same count on
                        each, and the algorithm can be the inter-node stage (not
                        covap, dgs); off: the flat exchange on any layout.
                        Default: auto. The table then says the layout and, per
                        algorithm, per call and rank: intra-node and inter-node
                        bytes sent and seconds (details intra_node_sent_bytes,
                        inter_node_sent_bytes, intra_node_s, inter_node_s, ...:
                        medians over the timed calls, not the last call's)
  --quiet               no progress lines on stderr
  -h, --help            this text
      --version         print the version (release, git, CUDA, UCX) and exit

Timing: every call starts after a barrier; a call's time is the slowest rank's
wall time; median_s and p90_s are over the timed calls. Bytes are per call,
averaged over ranks, frame headers included. algbw = N*4 bytes / median_s,
busbw = algbw * 2(P-1)/P (nccl-tests' allreduce definitions).

Invariants (last iteration, checked over the same transport): consistency (all
ranks hold a bitwise-identical result), conservation (dense-ring sum of
grad + residual_in - residual_out equals the result), bounds (result non-zeros
within what the algorithm promises). Exit status: 0 when every algorithm ran
and held its invariants, 1 on a run error, 2 on bad flags, 3 when an invariant
failed.
)";
}

absl::StatusOr<BenchFlags> ParseFlags(int argc, char** argv) {
  BenchFlags f;
  bool teams_set = false;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      f.help = true;
      continue;
    }
    if (arg.size() < 3 || arg.substr(0, 2) != "--") {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", arg, "' (flags start with --; see --help)"));
    }
    absl::string_view name = arg.substr(2);
    absl::string_view value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != absl::string_view::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    static const std::set<absl::string_view> kBool = {"json", "integer", "quiet",
                                                      "no-threshold-reuse"};
    if (kBool.count(name)) {
      if (has_value) return Bad(name, value, "this flag takes no value");
      if (name == "json") f.json = true;
      if (name == "integer") f.integer = true;
      if (name == "quiet") f.quiet = true;
      if (name == "no-threshold-reuse") f.threshold_reuse = false;
      continue;
    }
    static const std::set<absl::string_view> kValued = {"algo",
                                                        "ranks",
                                                        "elements",
                                                        "density",
                                                        "teams",
                                                        "iters",
                                                        "warmup",
                                                        "transport",
                                                        "seed",
                                                        "quantize-bits",
                                                        "param",
                                                        "dump",
                                                        "deadline-ms",
                                                        "timeout-s",
                                                        "connect-timeout-ms",
                                                        "rank-wrapper",
                                                        "json-out",
                                                        "ranks-per-node",
                                                        "node-of-rank",
                                                        "hierarchy",
                                                        "rank",
                                                        "bootstrap-dir",
                                                        "report-fd",
                                                        "fault-kill-rank",
                                                        "fault-kill-after-ms",
                                                        "fault-kill-at-call",
                                                        "fault-kill-after-sends"};
    if (!kValued.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    if (!has_value) {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
      }
      value = argv[++i];
    }
    int64_t x = 0;
    if (name == "algo") {
      if (value.empty()) return Bad(name, value, "empty");
      f.algo = std::string(value);
    } else if (name == "ranks") {
      if (auto s = ParseInt(name, value, 1, 1024, &x); !s.ok()) return s;
      f.ranks = static_cast<int>(x);
    } else if (name == "elements") {
      if (auto s = ParseInt(name, value, 1, 0xffffffffLL, &x); !s.ok()) return s;
      f.elements = static_cast<uint64_t>(x);
    } else if (name == "density") {
      if (auto s = ParseDouble(name, value, &f.density); !s.ok()) return s;
      if (!(f.density > 0 && f.density <= 1)) return Bad(name, value, "must be in (0, 1]");
    } else if (name == "teams") {
      if (auto s = ParseInt(name, value, 1, 1024, &x); !s.ok()) return s;
      f.teams = static_cast<int>(x);
      teams_set = true;
    } else if (name == "iters") {
      if (auto s = ParseInt(name, value, 1, 1'000'000, &x); !s.ok()) return s;
      f.iters = static_cast<int>(x);
    } else if (name == "warmup") {
      if (auto s = ParseInt(name, value, 0, 1'000'000, &x); !s.ok()) return s;
      f.warmup = static_cast<int>(x);
    } else if (name == "transport") {
      if (value != "ucx" && value != "loopback") return Bad(name, value, "must be ucx or loopback");
      f.transport = std::string(value);
    } else if (name == "quantize-bits") {
      if (auto s = ParseInt(name, value, 0, 8, &x); !s.ok()) return s;
      if (x != 0 && x != 2 && x != 4 && x != 8) return Bad(name, value, "must be 0, 2, 4 or 8");
      f.quantize_bits = static_cast<int>(x);
    } else if (name == "param") {
      const size_t eq = value.find('=');
      double v = 0;
      if (eq == 0 || eq == absl::string_view::npos) return Bad(name, value, "expected NAME=VALUE");
      if (auto s = ParseDouble(name, value.substr(eq + 1), &v); !s.ok()) return s;
      const std::string pname(value.substr(0, eq));
      bool known = false;
      for (const catalog::AlgorithmSpec* spec : catalog::All()) {
        const catalog::ParamSpec* p = catalog::FindParam(*spec, pname);
        if (p == nullptr) continue;
        known = true;
        if (auto s = catalog::CheckParam(*p, v); !s.ok()) return Bad(name, value, s.message());
      }
      if (!known) return Bad(name, value, "no catalog algorithm has this parameter");
      f.params[pname] = v;
    } else if (name == "seed") {
      if (auto s = ParseU64(name, value, &f.seed); !s.ok()) return s;
    } else if (name == "dump") {
      if (value.empty()) return Bad(name, value, "empty directory name");
      f.dump_dir = std::string(value);
    } else if (name == "json-out") {
      if (value.empty()) return Bad(name, value, "empty file name");
      f.json_out = std::string(value);
    } else if (name == "deadline-ms") {
      if (auto s = ParseInt(name, value, 1, 86'400'000, &x); !s.ok()) return s;
      f.deadline_ms = x;
    } else if (name == "timeout-s") {
      if (auto s = ParseInt(name, value, 1, 7 * 86'400, &x); !s.ok()) return s;
      f.timeout_s = x;
    } else if (name == "connect-timeout-ms") {
      if (auto s = ParseInt(name, value, 1, 3'600'000, &x); !s.ok()) return s;
      f.connect_timeout_ms = x;
    } else if (name == "rank-wrapper") {
      f.rank_wrapper = std::string(value);
    } else if (name == "ranks-per-node") {
      if (auto s = ParseInt(name, value, 1, 1024, &x); !s.ok()) return s;
      f.ranks_per_node = static_cast<int>(x);
    } else if (name == "node-of-rank") {
      f.node_of_rank = absl::StrSplit(value, ',');
      for (const std::string& node : f.node_of_rank) {
        if (node.empty()) return Bad(name, value, "an empty node name");
      }
    } else if (name == "hierarchy") {
      if (value != "auto" && value != "off") return Bad(name, value, "must be auto or off");
      f.hierarchy = std::string(value);
    } else if (name == "rank") {
      if (auto s = ParseInt(name, value, 0, 1023, &x); !s.ok()) return s;
      f.rank = static_cast<int>(x);
    } else if (name == "bootstrap-dir") {
      f.bootstrap_dir = std::string(value);
    } else if (name == "report-fd") {
      if (auto s = ParseInt(name, value, 0, 1 << 20, &x); !s.ok()) return s;
      f.report_fd = static_cast<int>(x);
    } else if (name == "fault-kill-rank") {
      if (auto s = ParseInt(name, value, 0, 1023, &x); !s.ok()) return s;
      f.fault_rank = static_cast<int>(x);
    } else if (name == "fault-kill-after-sends") {
      if (auto s = ParseInt(name, value, 0, 1'000'000, &x); !s.ok()) return s;
      f.fault_sends = static_cast<int>(x);
    } else if (name == "fault-kill-at-call") {
      if (auto s = ParseInt(name, value, 0, 1'000'000, &x); !s.ok()) return s;
      f.fault_call = static_cast<int>(x);
    } else if (name == "fault-kill-after-ms") {
      if (auto s = ParseInt(name, value, 0, 86'400'000, &x); !s.ok()) return s;
      f.fault_after_ms = x;
    }
  }
  if (f.help) return f;
  if (f.quantize_bits != 0) f.params.emplace("quantize_bits", f.quantize_bits);
  if (teams_set && f.ranks % f.teams != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--teams ", f.teams, " does not divide --ranks ", f.ranks));
  }
  if (!teams_set) f.teams = (f.ranks % 2 == 0) ? 2 : 1;
  if (f.ranks % f.ranks_per_node != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ranks-per-node ", f.ranks_per_node, " does not divide --ranks ", f.ranks));
  }
  if (!f.node_of_rank.empty()) {
    if (f.ranks_per_node != 1) {
      return absl::InvalidArgumentError("--node-of-rank and --ranks-per-node exclude each other");
    }
    if (static_cast<int>(f.node_of_rank.size()) != f.ranks) {
      return absl::InvalidArgumentError(absl::StrCat("--node-of-rank names ", f.node_of_rank.size(),
                                                     " nodes, --ranks is ", f.ranks));
    }
  }
  if (f.rank >= f.ranks) {
    return absl::InvalidArgumentError(absl::StrCat("--rank ", f.rank, " >= --ranks ", f.ranks));
  }
  if (f.rank >= 0 && (f.transport != "ucx" || f.bootstrap_dir.empty())) {
    return absl::InvalidArgumentError(
        "--rank is internal: needs --transport ucx and --bootstrap-dir");
  }
  if (f.fault_rank >= 0 && f.transport != "ucx") {
    return absl::InvalidArgumentError("--fault-kill-rank needs --transport ucx");
  }
  if (!f.rank_wrapper.empty() && f.transport != "ucx") {
    return absl::InvalidArgumentError("--rank-wrapper needs --transport ucx");
  }
  return f;
}

std::vector<std::string> NodeOfRank(const BenchFlags& flags) {
  if (!flags.node_of_rank.empty()) return flags.node_of_rank;
  std::vector<std::string> out;
  for (int r = 0; r < flags.ranks; ++r) {
    out.push_back(absl::StrCat("node", r / flags.ranks_per_node));
  }
  return out;
}

catalog::NodeLayout LayoutFor(const BenchFlags& flags) {
  return catalog::LayoutOf(NodeOfRank(flags));
}

std::string FlatReasonFor(const std::string& algo, const BenchFlags& flags) {
  if (flags.hierarchy == "off") return "--hierarchy off";
  return collectives::algorithms::FlatReason(algo, LayoutFor(flags));
}

absl::StatusOr<std::vector<std::string>> ResolveAlgorithms(const std::string& algo,
                                                           const std::vector<std::string>& known) {
  if (algo == "all") {
    if (known.empty()) return absl::FailedPreconditionError("no algorithm is registered");
    return known;
  }
  std::vector<std::string> out;
  for (absl::string_view name : absl::StrSplit(algo, ',', absl::SkipEmpty())) {
    bool found = false;
    for (const auto& k : known) found = found || k == name;
    if (!found) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown algorithm '", name,
                       "' for --algo; registered: ", absl::StrJoin(known, ", "), ", or all"));
    }
    bool dup = false;
    for (const auto& o : out) dup = dup || o == name;
    if (!dup) out.emplace_back(name);
  }
  if (out.empty()) return absl::InvalidArgumentError("--algo names no algorithm");
  return out;
}

int TeamsFor(const std::string& algo, const BenchFlags& flags) {
  // Only algorithms with teams (the Spar-All-Gather variants) split ranks.
  return catalog::TraitsOf(algo).uses_teams ? flags.teams : 1;
}

std::string SkipReason(const std::string& algo, const BenchFlags& flags) {
  const catalog::Traits traits = catalog::TraitsOf(algo);
  if (traits.uses_teams && traits.teams_power_of_two && !IsPowerOfTwo(flags.teams)) {
    return absl::StrCat("skipped: ", algo, " needs a power-of-two team count, --teams is ",
                        flags.teams);
  }
  return "";
}

}  // namespace gradex::bench
