#include "bench/sim/node_report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/sim/sim_driver.h"
#include "catalog/catalog.h"
#include "collectives/algorithms/hierarchical.h"

namespace gradex::sim {
namespace {

// "1.234" or "[1.234, 5.678]" (ms).
std::string Ms(double lo_s, double hi_s) {
  if (lo_s == hi_s) return absl::StrFormat("%.3f", hi_s * 1e3);
  return absl::StrFormat("[%.3f, %.3f]", lo_s * 1e3, hi_s * 1e3);
}

std::string Ratio(double lo, double hi) {
  if (lo == hi) return absl::StrFormat("%.3f", hi);
  return absl::StrFormat("[%.3f, %.3f]", std::min(lo, hi), std::max(lo, hi));
}

std::string StageJson(const char* name, const StageCost& s) {
  return absl::StrFormat(R"("%s":{"lo_s":%.9g,"hi_s":%.9g,"nic_bytes_lo":%.0f,"nic_bytes_hi":%.0f,)"
                         R"("link_bytes_lo":%.0f,"link_bytes_hi":%.0f,"messages":%.0f})",
                         name, s.lo_s, s.hi_s, s.nic_bytes_lo, s.nic_bytes_hi, s.link_bytes_lo,
                         s.link_bytes_hi, s.messages);
}

std::string ExchangeJson(const char* name, const ExchangeCost& e) {
  return absl::StrFormat(R"("%s":{"lo_s":%.9g,"hi_s":%.9g,%s,%s,%s})", name, e.lo_s(), e.hi_s(),
                         StageJson("reduce_scatter", e.reduce_scatter), StageJson("inter", e.inter),
                         StageJson("all_gather", e.all_gather));
}

std::string Header(const SimFlags& f) {
  return absl::StrFormat(
      R"({"model":"node","ranks":%d,"nodes":%d,"ranks_per_node":%d,"elements":%d,)"
      R"("density":%g,"alpha":%g,"beta":%g,"intra_alpha":%g,"intra_beta":%g)",
      f.ranks, f.ranks / f.ranks_per_node, f.ranks_per_node, f.elements, f.density, f.alpha, f.beta,
      f.intra_alpha, f.intra_beta);
}

}  // namespace

NodeNetwork NetworkOf(const SimFlags& f) {
  NodeNetwork net;
  net.ranks_per_node = f.ranks_per_node;
  net.nodes = f.ranks / f.ranks_per_node;
  net.alpha = f.alpha;
  net.beta = f.beta;
  net.intra_alpha = f.intra_alpha;
  net.intra_beta = f.intra_beta;
  return net;
}

std::vector<std::string> NodeModelNames() {
  std::vector<std::string> names;
  for (const std::string& name : Table1Names()) {
    const catalog::AlgorithmSpec* spec = catalog::Find(name);
    if (spec != nullptr && collectives::algorithms::HierarchyExclusion(*spec).empty())
      names.push_back(name);
  }
  return names;
}

NodeRow ModelAlgorithm(const SimFlags& flags, const std::string& algo) {
  NodeRow row;
  row.algo = algo;
  const catalog::AlgorithmSpec* spec = catalog::Find(algo);
  if (spec == nullptr) {
    row.skipped = "not in the catalog";
    return row;
  }
  if (std::string why = collectives::algorithms::HierarchyExclusion(*spec); !why.empty()) {
    row.skipped = "runs flat only: " + why;
    return row;
  }
  const NodeNetwork net = NetworkOf(flags);
  row.flat_teams =
      ResolveTeams(spec->traits.uses_teams, flags, &row.skipped, spec->traits.teams_power_of_two);
  if (!row.skipped.empty()) return row;
  row.inter_teams = spec->traits.uses_teams ? InterNodeTeams(row.flat_teams, net.nodes) : 1;
  absl::StatusOr<ExchangeCost> flat =
      FlatCost(algo, net, flags.elements, flags.density, row.flat_teams);
  absl::StatusOr<ExchangeCost> hier =
      HierarchicalCost(algo, net, flags.elements, flags.density, row.inter_teams);
  if (!flat.ok() || !hier.ok()) {
    row.skipped = std::string((flat.ok() ? hier.status() : flat.status()).message());
    return row;
  }
  row.flat = *flat;
  row.hier = *hier;
  return row;
}

std::string NodeRowJson(const NodeRow& r, const SimFlags& f, const ExchangeCost& nccl) {
  std::string s = absl::StrCat(Header(f), absl::StrFormat(R"(,"algo":"%s")", r.algo));
  if (!r.skipped.empty()) {
    std::string why = r.skipped;
    for (char& c : why) c = c == '"' || c == '\\' ? '\'' : c;
    return absl::StrCat(s, R"(,"skipped":")", why, "\"}");
  }
  absl::StrAppendFormat(
      &s,
      R"(,"flat_teams":%d,"inter_teams":%d,%s,%s,"hier_over_flat_lo":%.6g,"hier_over_flat_hi":%.6g,)"
      R"("hier_over_nccl_lo":%.6g,"hier_over_nccl_hi":%.6g})",
      r.flat_teams, r.inter_teams, ExchangeJson("flat", r.flat),
      ExchangeJson("hierarchical", r.hier), r.hier.lo_s() / r.flat.lo_s(),
      r.hier.hi_s() / r.flat.hi_s(), r.hier.lo_s() / nccl.lo_s(), r.hier.hi_s() / nccl.hi_s());
  return s;
}

std::string NcclJson(const ExchangeCost& nccl, const SimFlags& f) {
  return absl::StrCat(Header(f), R"(,"algo":"nccl-hierarchical-dense",)",
                      ExchangeJson("hierarchical", nccl), "}");
}

std::string NodeTable(const std::vector<NodeRow>& rows, const SimFlags& f,
                      const ExchangeCost& nccl) {
  const int l = f.ranks_per_node, nodes = f.ranks / l;
  std::string s = absl::StrFormat(
      "gradex-sim node model: P=%d as %d nodes x %d ranks, N=%d elements, density=%g\n"
      "  between nodes: alpha=%g s, beta=%g s/B (%.1f Gbit/s, one NIC a node, shared by its %d "
      "ranks)\n"
      "  inside a node: alpha=%g s, beta=%g s/B (%.1f GB/s a rank)\n"
      "  closed form over the Table 1 rows, no simulated run; ms, [lo, hi] where a row has a "
      "range\n",
      f.ranks, nodes, l, f.elements, f.density, f.alpha, f.beta, f.beta > 0 ? 8e-9 / f.beta : 0.0,
      l, f.intra_alpha, f.intra_beta, f.intra_beta > 0 ? 1e-9 / f.intra_beta : 0.0);
  absl::StrAppendFormat(&s, "%-20s %5s %19s %9s | %8s %19s %8s %19s %9s | %15s %15s\n", "algorithm",
                        "T", "flat ms", "NIC MB", "RS ms", "inter ms", "AG ms", "hier ms", "NIC MB",
                        "hier/flat", "hier/nccl");
  for (const NodeRow& r : rows) {
    if (!r.skipped.empty()) {
      absl::StrAppendFormat(&s, "%-20s      skipped: %s\n", r.algo, r.skipped);
      continue;
    }
    absl::StrAppendFormat(&s, "%-20s %5s %19s %9.2f | %8.3f %19s %8.3f %19s %9.2f | %15s %15s\n",
                          r.algo, absl::StrCat(r.flat_teams, "/", r.inter_teams),
                          Ms(r.flat.lo_s(), r.flat.hi_s()), r.flat.inter.nic_bytes_hi / 1e6,
                          r.hier.reduce_scatter.hi_s * 1e3,
                          Ms(r.hier.inter.lo_s, r.hier.inter.hi_s), r.hier.all_gather.hi_s * 1e3,
                          Ms(r.hier.lo_s(), r.hier.hi_s()), r.hier.inter.nic_bytes_hi / 1e6,
                          Ratio(r.hier.lo_s() / r.flat.lo_s(), r.hier.hi_s() / r.flat.hi_s()),
                          Ratio(r.hier.lo_s() / nccl.lo_s(), r.hier.hi_s() / nccl.hi_s()));
  }
  absl::StrAppendFormat(&s, "%-20s %5s %19s %9s | %8.3f %19s %8.3f %19s %9.2f |\n",
                        "nccl-hier-dense", "-", "-", "-", nccl.reduce_scatter.hi_s * 1e3,
                        Ms(nccl.inter.lo_s, nccl.inter.hi_s), nccl.all_gather.hi_s * 1e3,
                        Ms(nccl.lo_s(), nccl.hi_s()), nccl.inter.nic_bytes_hi / 1e6);
  s += "T: teams flat/hierarchical (the inter-node stage keeps them where they divide the "
       "nodes). NIC MB: bytes leaving one node; AG ms, NIC MB: the top of their range.\n";
  return s;
}

}  // namespace gradex::sim
