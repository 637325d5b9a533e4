// Not absl::flags, on purpose: absl flag names are C++ identifiers, so it
// cannot accept the hyphenated names this command line has always had (the
// chart, scripts, docs and tests pass them), and its parser exits 1 and
// takes --json=yes, where this one exits 2 naming the flag and its range.
#include "bench/sim/sim_flags.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gradex::sim {

std::string SimHelpText() {
  return R"(gradex-sim: run the real exchange algorithms on P simulated ranks (threads in
one process) over a transport with a virtual α-β(-γ) clock.

usage: gradex-sim [flags]
  --algo NAME|LIST|all   algorithms (registered names, comma-separated)  [all]
  --ranks P              simulated ranks, 1..1024                          [8]
  --elements N           gradient elements per rank                 [25000000]
  --density D            kept fraction, (0, 1]                          [0.01]
  --teams T              SparDL SAG teams (0: 2 when it divides P, else 1) [0]
  --alpha S              latency per message, seconds                  [2e-05]
  --beta S_PER_BYTE      seconds per byte (8/25e9: 25 Gbit/s)         [3.2e-10]
  --gamma S_PER_WORD     seconds per received 4-byte word (reduction)      [0]
  --ranks-per-node L     ranks a node (dividing P); above 1, print the closed-form
                         node model instead of running: flat vs hierarchical vs
                         NCCL's hierarchical dense, stage by stage, with --beta
                         the node's NIC shared by its L ranks                [1]
  --intra-alpha S        latency per message inside a node, seconds   [3.4e-06]
  --intra-beta S_PER_BYTE  seconds per byte of a rank's intra-node link
                         (1/300e9: 300 GB/s, NVLink)                 [3.33e-12]
  --iters I              calls, residuals carried over, all timed          [1]
  --seed S               gradient seed                                     [1]
  --integer              integer gradients: conservation checked exactly
  --mem-gib G            memory budget; beyond it N is halved until it fits,
                         run at N1 and N1/2, and extrapolated to N          [12]
  --json                 one JSON object per algorithm instead of the table
  --help                 this text
  --version              print the version and exit

Time per call is the max over ranks of the virtual clock (every rank starts a
call at 0). A send occupies its sender's link for α + β·bytes (sends posted at
once serialise); a receive completes at max(clock, arrival) + γ·words.
Computation is free unless --gamma is set; incoming links are not modelled.
The node model (--ranks-per-node > 1) is α-β arithmetic over the Table 1
rows, no run: --gamma, --iters, --seed, --integer and --mem-gib do not apply.
)";
}

absl::StatusOr<SimFlags> ParseSimFlags(int argc, char** argv) {
  SimFlags f;
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (a == "--help" || a == "-h") {
      f.help = true;
      continue;
    }
    if (a == "--json") {
      f.json = true;
      continue;
    }
    if (a == "--integer") {
      f.integer = true;
      continue;
    }
    absl::string_view value;
    if (size_t eq = a.find('='); eq != absl::string_view::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat(a, " needs a value (see --help)"));
    }
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(a, " ", value, ": ", why));
    };
    bool ok = true;
    if (a == "--algo") {
      f.algo = std::string(value);
      ok = !value.empty();
    } else if (a == "--ranks") {
      ok = absl::SimpleAtoi(value, &f.ranks);
      if (ok && (f.ranks < 1 || f.ranks > 1024)) return bad("must be in 1..1024");
    } else if (a == "--elements") {
      ok = absl::SimpleAtoi(value, &f.elements);
      if (ok && (f.elements < 1 || f.elements >= (uint64_t{1} << 32) - 1)) {
        return bad("must be in 1..2^32-2");
      }
    } else if (a == "--density") {
      ok = absl::SimpleAtod(value, &f.density);
      if (ok && !(f.density > 0 && f.density <= 1)) return bad("must be in (0, 1]");
    } else if (a == "--teams") {
      ok = absl::SimpleAtoi(value, &f.teams);
      if (ok && f.teams < 0) return bad("must be >= 0");
    } else if (a == "--alpha" || a == "--beta" || a == "--gamma" || a == "--mem-gib" ||
               a == "--intra-alpha" || a == "--intra-beta") {
      double* dst = a == "--alpha"         ? &f.alpha
                    : a == "--beta"        ? &f.beta
                    : a == "--gamma"       ? &f.gamma
                    : a == "--intra-alpha" ? &f.intra_alpha
                    : a == "--intra-beta"  ? &f.intra_beta
                                           : &f.mem_gib;
      ok = absl::SimpleAtod(value, dst);
      if (ok && !(std::isfinite(*dst) && *dst >= 0)) return bad("must be a finite number >= 0");
    } else if (a == "--ranks-per-node") {
      ok = absl::SimpleAtoi(value, &f.ranks_per_node);
      if (ok && f.ranks_per_node < 1) return bad("must be >= 1");
    } else if (a == "--iters") {
      ok = absl::SimpleAtoi(value, &f.iters);
      if (ok && f.iters < 1) return bad("must be >= 1");
    } else if (a == "--seed") {
      ok = absl::SimpleAtoi(value, &f.seed);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", a, " (see --help)"));
    }
    if (!ok) return bad("not a valid value");
  }
  if (f.teams > f.ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("--teams ", f.teams, " exceeds --ranks ", f.ranks));
  }
  if (f.ranks % f.ranks_per_node != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ranks-per-node ", f.ranks_per_node, " does not divide --ranks ", f.ranks));
  }
  return f;
}

}  // namespace gradex::sim
