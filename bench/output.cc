#include "bench/output.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collectives/algorithms/hierarchical.h"

namespace gradex::bench {
namespace {

std::string Num(double x) {
  // %.9g keeps JSON numbers short and round-trippable enough for reports.
  return absl::StrFormat("%.9g", x);
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

double Detail(const AlgoSummary& s, std::string_view name) {
  for (const auto& [n, v] : s.details) {
    if (n == name) return v;
  }
  return 0;
}

// With ranks sharing nodes: the layout, and per algorithm whether it ran
// hierarchical, with its two stages' bytes and time, or flat and why.
std::string NodeLines(const std::vector<AlgoSummary>& all, const BenchFlags& flags) {
  const catalog::NodeLayout layout = LayoutFor(flags);
  if (layout.nodes() == layout.world()) return "";
  std::string out = absl::StrCat("layout: ", layout.Describe(), "; per call and rank (medians ",
                                 "over the timed calls, mean over ranks), intra-node = dense ",
                                 "reduce-scatter + all-gather, inter-node = the algorithm on ",
                                 "the node's shard:\n");
  for (const auto& s : all) {
    if (!s.ran()) continue;
    const std::string flat = FlatReasonFor(s.algo, flags);
    if (!flat.empty()) {
      out += absl::StrFormat("%-16s flat (%s)\n", s.algo, flat);
      continue;
    }
    out += absl::StrFormat(
        "%-16s hierarchical: intra-node sent %.3f MB in %.1f ms, inter-node sent %.3f MB in "
        "%.1f ms\n",
        s.algo, Detail(s, collectives::algorithms::kDetailIntraNodeSentBytes) / 1e6,
        Detail(s, collectives::algorithms::kDetailIntraNodeSeconds) * 1e3,
        Detail(s, collectives::algorithms::kDetailInterNodeSentBytes) / 1e6,
        Detail(s, collectives::algorithms::kDetailInterNodeSeconds) * 1e3);
  }
  return out;
}

}  // namespace

double AlgBwGbps(const BenchFlags& flags, double seconds) {
  return seconds > 0 ? double(flags.elements) * 4.0 / seconds / 1e9 : 0;
}

double BusBwGbps(const BenchFlags& flags, double seconds) {
  return AlgBwGbps(flags, seconds) * 2.0 * double(flags.ranks - 1) / double(flags.ranks);
}

// ,"details":{"name":value,...}: the algorithm's own details, when it
// reports any (the other fields are the same for every algorithm).
static std::string DetailsJson(const AlgoSummary& s) {
  if (s.details.empty()) return "";
  std::string out = ",\"details\":{";
  const char* sep = "";
  for (const auto& [name, value] : s.details) {
    absl::StrAppend(&out, sep, JsonString(name), ":", Num(value));
    sep = ",";
  }
  return out + "}";
}

std::string JsonLine(const AlgoSummary& s, const BenchFlags& flags) {
  return absl::StrCat(
      "{\"algo\":", JsonString(s.algo), ",\"ranks\":", s.ranks, ",\"teams\":", s.teams,
      ",\"elements\":", flags.elements, ",\"density\":", Num(flags.density), ",\"iters\":", s.iters,
      ",\"median_s\":", Num(s.median_s), ",\"p90_s\":", Num(s.p90_s),
      ",\"sent_bytes_per_rank\":", Num(s.sent_bytes_per_rank),
      ",\"recv_bytes_per_rank\":", Num(s.recv_bytes_per_rank), ",\"result_nnz\":", s.result_nnz,
      ",\"consistent\":", s.consistent ? "true" : "false",
      ",\"conservation_max_abs_err\":", Num(s.conservation_max_abs_err),
      ",\"algbw_gbps\":", Num(AlgBwGbps(flags, s.median_s)),
      ",\"busbw_gbps\":", Num(BusBwGbps(flags, s.median_s)), DetailsJson(s), "}");
}

std::string Table(const std::vector<AlgoSummary>& all, const BenchFlags& flags) {
  std::string out = absl::StrFormat(
      "gradex-bench: %d ranks over %s, N=%d, density %g, %d timed calls after %d warmup, "
      "seed %d%s\n",
      flags.ranks, flags.transport, flags.elements, flags.density, flags.iters, flags.warmup,
      flags.seed, flags.integer ? " (integer gradients)" : "");
  out += absl::StrFormat("%-16s %5s %10s %10s %10s %10s %11s %-10s %-27s %10s\n", "algorithm",
                         "teams", "median ms", "p90 ms", "sent MB", "recv MB", "result nnz",
                         "invariants", " select /    comm /  reduce", "busbw GB/s");
  std::vector<std::string> notes;
  for (const auto& s : all) {
    if (!s.skip_note.empty()) {
      out += absl::StrFormat("%-16s %5d  %s\n", s.algo, s.teams, s.skip_note);
      continue;
    }
    if (!s.errors.empty()) {
      out += absl::StrFormat("%-16s %5d  FAILED: %s\n", s.algo, s.teams, s.errors[0]);
      for (size_t i = 1; i < s.errors.size(); ++i) out += absl::StrCat("      ", s.errors[i], "\n");
      continue;
    }
    std::string inv = s.invariants_ok() ? "yes" : "NO";
    if (!s.invariants_ok()) {
      notes.push_back(absl::StrFormat(
          "%s: consistent=%s bounds=%s (nnz %d, capacity %d) conservation=%s (max abs err %g, "
          "relative %g)",
          s.algo, s.consistent ? "yes" : "NO", s.bounds_ok ? "yes" : "NO", s.result_nnz,
          s.result_capacity, s.conservation_ok ? "yes" : "NO", s.conservation_max_abs_err,
          s.conservation_rel_err));
    }
    out += absl::StrFormat(
        "%-16s %5d %10.2f %10.2f %10.2f %10.2f %11d %-10s %7.1f / %7.1f / %7.1f %10.3f\n", s.algo,
        s.teams, s.median_s * 1e3, s.p90_s * 1e3, s.sent_bytes_per_rank / 1e6,
        s.recv_bytes_per_rank / 1e6, s.result_nnz, inv, s.selection_s * 1e3,
        s.communication_s * 1e3, s.reduction_s * 1e3, BusBwGbps(flags, s.median_s));
  }
  out +=
      "(per call: time of the slowest rank; MB = 1e6 bytes sent/received per rank; invariants = "
      "consistent + conserved + within bounds; select / comm / reduce: ms per call in each phase, "
      "per-rank medians averaged over ranks)\n";
  bool titled = false;
  for (const auto& s : all) {
    if (!s.ran() || s.details.empty()) continue;
    if (!titled) out += "details (the algorithm's own, last call, mean over ranks):\n";
    titled = true;
    out += absl::StrFormat("%-16s", s.algo);
    for (const auto& [name, value] : s.details) absl::StrAppend(&out, " ", name, "=", value);
    out += "\n";
  }
  out += NodeLines(all, flags);
  for (const auto& n : notes) out += absl::StrCat("invariant failure: ", n, "\n");
  return out;
}

}  // namespace gradex::bench
