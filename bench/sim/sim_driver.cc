#include "bench/sim/sim_driver.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/sim/memory_plan.h"
#include "collectives/sparse_allreduce.h"

namespace gradex::sim {
namespace {

bool IsPow2(int x) { return x > 0 && (x & (x - 1)) == 0; }

// Affine extrapolation of every size-proportional quantity of `a` (at n1)
// and `b` (at n2) to n; invariant verdicts must hold in both runs.
SimOutcome ExtrapolateOutcome(const SimOutcome& a, uint64_t n1, const SimOutcome& b, uint64_t n2,
                              uint64_t n) {
  auto ex = [&](double v1, double v2) { return Extrapolate(v1, n1, v2, n2, n); };
  SimOutcome o = a;
  o.time_mean_s = ex(a.time_mean_s, b.time_mean_s);
  o.time_last_s = ex(a.time_last_s, b.time_last_s);
  o.sent_max = static_cast<uint64_t>(std::llround(ex(a.sent_max, b.sent_max)));
  o.recv_max = static_cast<uint64_t>(std::llround(ex(a.recv_max, b.recv_max)));
  o.sent_mean = ex(a.sent_mean, b.sent_mean);
  o.recv_mean = ex(a.recv_mean, b.recv_mean);
  o.result_nnz = static_cast<size_t>(std::llround(ex(a.result_nnz, b.result_nnz)));
  o.result_capacity = static_cast<size_t>(std::llround(ex(a.result_capacity, b.result_capacity)));
  o.consistent = a.consistent && b.consistent;
  o.conserved = a.conserved && b.conserved;
  o.max_conservation_err = std::max(a.max_conservation_err, b.max_conservation_err);
  return o;
}

}  // namespace

absl::StatusOr<Decomposition> DecomposeTime(const SimConfig& config, uint64_t n1, uint64_t n2,
                                            uint64_t n) {
  if (config.params.gamma_s_per_word != 0) {
    return absl::InvalidArgumentError("no decomposition with gamma (compute would join both)");
  }
  SimConfig c = config;
  c.elements = n1;
  c.params = transport::SimParams{1, 0, 0};
  absl::StatusOr<SimOutcome> lat = RunSim(c);
  if (!lat.ok()) return lat.status();
  c.params = transport::SimParams{0, 1, 0};
  absl::StatusOr<SimOutcome> b1 = RunSim(c);
  if (!b1.ok()) return b1.status();
  c.elements = n2;
  absl::StatusOr<SimOutcome> b2 = RunSim(c);
  if (!b2.ok()) return b2.status();
  if (b1->time_mean_s < b2->time_mean_s) {
    return absl::FailedPreconditionError(
        absl::StrFormat("critical-path bytes not increasing in N (%.0f at N=%d, %.0f at N=%d)",
                        b1->time_mean_s, n1, b2->time_mean_s, n2));
  }
  Decomposition d;
  d.messages = lat->time_mean_s;
  d.bytes = Extrapolate(b1->time_mean_s, n1, b2->time_mean_s, n2, n);
  const double a = config.params.alpha_s * d.messages, b = config.params.beta_s_per_byte * d.bytes;
  d.time_lo_s = std::max(a, b);
  d.time_hi_s = a + b;
  return d;
}

int ResolveTeams(bool uses_teams, const SimFlags& flags, std::string* skip, bool pow2_only) {
  if (!uses_teams) return 1;
  int t = flags.teams > 0 ? flags.teams : (flags.ranks % 2 == 0 ? 2 : 1);
  if (flags.ranks % t != 0) {
    *skip = absl::StrCat("teams ", t, " do not divide ", flags.ranks, " ranks");
  } else if (pow2_only && !IsPow2(t)) {
    *skip = absl::StrCat("needs a power-of-two team count, got ", t);
  }
  return t;
}

SimRow SimulateAlgorithm(const SimFlags& flags, const std::string& algo) {
  SimRow row;
  row.algo = algo;
  row.ranks = flags.ranks;
  row.elements = flags.elements;
  absl::StatusOr<std::unique_ptr<collectives::SparseAllreduce>> probe =
      collectives::CreateAllreduce(algo);
  if (!probe.ok()) {
    row.error = std::string(probe.status().message());
    return row;
  }
  const collectives::AlgorithmTraits traits = (*probe)->traits();
  row.teams = ResolveTeams(traits.uses_teams, flags, &row.skipped, traits.teams_power_of_two);
  if (!row.skipped.empty()) return row;
  if (absl::StatusOr<CostRange> m =
          Table1Cost(algo, flags.ranks, flags.elements, flags.density, row.teams);
      m.ok()) {
    row.has_model = true;
    row.model = *m;
    row.model_lo_s = CostLo(*m, flags.alpha, flags.beta);
    row.model_hi_s = CostHi(*m, flags.alpha, flags.beta);
  }
  const uint64_t budget = static_cast<uint64_t>(flags.mem_gib * (1ull << 30));
  const ElementPlan plan =
      PlanElements(algo, traits.dense, flags.ranks, flags.elements, flags.density, budget);
  row.n_run = plan.n_run;
  row.n_second = plan.n_second;
  if (const uint64_t need =
          EstimateBytes(algo, traits.dense, flags.ranks, plan.n_run, flags.density);
      need > budget) {
    // Running anyway would break the budget the caller set (the first sweep
    // did, by 4x): say what it needs instead.
    row.skipped = absl::StrFormat("needs ~%.1f GiB even at N=%d, over --mem-gib %g",
                                  need / double(1ull << 30), plan.n_run, flags.mem_gib);
    return row;
  }
  SimConfig cfg;
  cfg.algo = algo;
  cfg.ranks = flags.ranks;
  cfg.density = flags.density;
  cfg.teams = row.teams;
  cfg.params = transport::SimParams{flags.alpha, flags.beta, flags.gamma};
  cfg.iters = flags.iters;
  cfg.seed = flags.seed;
  cfg.integer = flags.integer;
  cfg.elements = plan.n_run;
  absl::StatusOr<SimOutcome> first = RunSim(cfg);
  if (!first.ok()) {
    row.error = first.status().ToString();
    row.peak_rss = PeakRssBytes();
    return row;
  }
  row.at_n = *first;
  if (plan.n_second != 0) {
    cfg.elements = plan.n_second;
    absl::StatusOr<SimOutcome> second = RunSim(cfg);
    if (!second.ok()) {
      row.error = second.status().ToString();
    } else if (first->time_mean_s < second->time_mean_s) {
      // Time must grow with N; where it does not, the small runs are in a
      // data-dependent regime (e.g. thresholds over a handful of entries per
      // region) and the line through them says nothing about N. Its parts
      // still do: decompose (see DecomposeTime).
      absl::StatusOr<Decomposition> d =
          DecomposeTime(cfg, plan.n_run, plan.n_second, flags.elements);
      if (!d.ok()) {
        row.error = absl::StrFormat(
            "extrapolation refused: time not increasing in N (%.6g s at N=%d, %.6g s at N=%d); "
            "no decomposition: %s; raise --mem-gib",
            first->time_mean_s, plan.n_run, second->time_mean_s, plan.n_second,
            std::string(d.status().message()));
      } else {
        row.at_n = ExtrapolateOutcome(*first, plan.n_run, *second, plan.n_second, flags.elements);
        row.at_n.time_mean_s = row.at_n.time_last_s = d->time_hi_s;
        row.decomposed = true;
        row.time_lo_s = d->time_lo_s;
      }
    } else {
      row.at_n = ExtrapolateOutcome(*first, plan.n_run, *second, plan.n_second, flags.elements);
    }
  }
  row.peak_rss = PeakRssBytes();
  return row;
}

std::string RowJson(const SimRow& r, const SimFlags& f) {
  std::string s = absl::StrFormat(
      R"({"algo":"%s","ranks":%d,"teams":%d,"elements":%d,"density":%g,"alpha":%g,)"
      R"("beta":%g,"gamma":%g,"iters":%d,"n_run":%d,"n_second":%d,"extrapolated":%s)",
      r.algo, r.ranks, r.teams, r.elements, f.density, f.alpha, f.beta, f.gamma, f.iters, r.n_run,
      r.n_second, r.n_second != 0 ? "true" : "false");
  if (r.decomposed)
    absl::StrAppendFormat(&s, R"(,"decomposed":true,"time_lo_s":%.9g)", r.time_lo_s);
  if (!r.skipped.empty()) return absl::StrCat(s, R"(,"skipped":")", r.skipped, "\"}");
  if (!r.error.empty()) {
    std::string e = r.error;
    for (char& c : e) c = c == '"' || c == '\\' ? '\'' : c;
    return absl::StrCat(s, R"(,"error":")", e, "\"}");
  }
  const SimOutcome& o = r.at_n;
  absl::StrAppendFormat(
      &s,
      R"(,"time_s":%.9g,"time_last_s":%.9g,"sent_bytes_max":%d,"recv_bytes_max":%d,)"
      R"("sent_bytes_mean":%.1f,"recv_bytes_mean":%.1f,"messages_max":%d,"result_nnz":%d,)"
      R"("result_capacity":%d,"consistent":%s,"conserved":%s,"max_conservation_err":%g,)"
      R"("peak_rss_bytes":%d)",
      o.time_mean_s, o.time_last_s, o.sent_max, o.recv_max, o.sent_mean, o.recv_mean,
      o.messages_max, o.result_nnz, o.result_capacity, o.consistent ? "true" : "false",
      o.conserved ? "true" : "false", o.max_conservation_err, r.peak_rss);
  if (r.has_model) {
    absl::StrAppendFormat(&s, R"(,"model_lo_s":%.9g,"model_hi_s":%.9g,"model":"%s")", r.model_lo_s,
                          r.model_hi_s, r.model.formula);
  }
  return s + "}";
}

std::string RowsTable(const std::vector<SimRow>& rows, const SimFlags& f) {
  std::string s = absl::StrFormat(
      "gradex-sim: P=%d N=%d density=%g alpha=%g s beta=%g s/B (%.1f Gbit/s) gamma=%g s/word "
      "iters=%d\n",
      f.ranks, f.elements, f.density, f.alpha, f.beta, f.beta > 0 ? 8e-9 / f.beta : 0.0, f.gamma,
      f.iters);
  absl::StrAppendFormat(&s, "%-20s %3s %11s %21s %11s %11s %6s %10s %5s %5s  %s\n", "algorithm",
                        "T", "time ms", "Table 1 ms [lo, hi]", "sent MB/rk", "recv MB/rk", "msgs",
                        "nnz", "cons", "consv", "note");
  for (const SimRow& r : rows) {
    if (!r.skipped.empty() || !r.error.empty()) {
      absl::StrAppendFormat(&s, "%-20s %3d  %s\n", r.algo, r.teams,
                            r.skipped.empty() ? "FAILED: " + r.error : "skipped: " + r.skipped);
      continue;
    }
    const SimOutcome& o = r.at_n;
    std::string model =
        r.has_model ? absl::StrFormat("[%.3f, %.3f]", r.model_lo_s * 1e3, r.model_hi_s * 1e3) : "-";
    std::string note = r.n_second != 0
                           ? absl::StrFormat("extrapolated from N=%d and %d", r.n_run, r.n_second)
                           : "";
    if (r.decomposed) {
      note += absl::StrFormat(" (α·L + β·B; at least %.3f ms)", r.time_lo_s * 1e3);
    }
    absl::StrAppendFormat(&s, "%-20s %3d %11.3f %21s %11.3f %11.3f %6d %10d %5s %5s  %s\n", r.algo,
                          r.teams, o.time_mean_s * 1e3, model, o.sent_max / 1e6, o.recv_max / 1e6,
                          o.messages_max, o.result_nnz, o.consistent ? "ok" : "FAIL",
                          o.conserved ? "ok" : "FAIL", note);
  }
  uint64_t rss = 0;
  for (const SimRow& r : rows) rss = std::max(rss, r.peak_rss);
  absl::StrAppendFormat(&s, "peak RSS %.2f GiB (budget %.1f GiB)\n", rss / double(1ull << 30),
                        f.mem_gib);
  return s;
}

}  // namespace gradex::sim
