#include "bench/stats.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"

namespace gradex::bench {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  rank = std::clamp<size_t>(rank, 1, v.size());
  return v[rank - 1];
}

AlgoSummary Summarize(const std::string& algo, int ranks, int teams,
                      const std::vector<RankAlgoReport>& reports, bool integer) {
  AlgoSummary s;
  s.algo = algo;
  s.ranks = ranks;
  s.teams = teams;
  std::vector<const RankAlgoReport*> by_rank(ranks, nullptr);
  for (const auto& r : reports) {
    if (r.rank >= 0 && r.rank < ranks) by_rank[r.rank] = &r;
  }
  for (const auto* r : by_rank) {
    if (r && !r->skip_note.empty()) {
      s.skip_note = r->skip_note;
      return s;
    }
  }
  for (int r = 0; r < ranks; ++r) {
    if (!by_rank[r]) {
      s.errors.push_back(absl::StrCat("rank ", r, ": no report (did not finish)"));
    } else if (!by_rank[r]->error.empty()) {
      s.errors.push_back(absl::StrCat("rank ", r, ": ", by_rank[r]->error));
    }
  }
  if (!s.errors.empty()) return s;

  const size_t iters = by_rank[0]->call_s.size();
  for (const auto* r : by_rank) {
    if (r->call_s.size() != iters) {
      s.errors.push_back("ranks reported different numbers of calls");
      return s;
    }
  }
  s.iters = static_cast<int>(iters);
  std::vector<double> per_call(iters, 0);
  double sent = 0, recv = 0;
  for (const auto* r : by_rank) {
    for (size_t i = 0; i < iters; ++i) per_call[i] = std::max(per_call[i], r->call_s[i]);
    s.selection_s += Median(r->selection_s) / ranks;
    s.communication_s += Median(r->communication_s) / ranks;
    s.reduction_s += Median(r->reduction_s) / ranks;
    for (size_t i = 0; i < iters; ++i) {
      sent += double(r->sent_bytes[i]);
      recv += double(r->recv_bytes[i]);
    }
  }
  s.median_s = Median(per_call);
  s.p90_s = Percentile(per_call, 0.9);
  s.sent_bytes_per_rank = sent / double(ranks) / double(iters);
  s.recv_bytes_per_rank = recv / double(ranks) / double(iters);
  s.result_nnz = by_rank[0]->result_nnz;
  s.result_capacity = by_rank[0]->result_capacity;
  std::map<std::string, std::pair<double, int>> details;  // name -> (sum, ranks)
  for (const auto* r : by_rank) {
    for (const auto& [name, value] : r->details) {
      details[name].first += value;
      ++details[name].second;
    }
  }
  for (const auto& [name, sum] : details) s.details.emplace_back(name, sum.first / sum.second);
  s.consistent = true;
  s.bounds_ok = true;
  s.conservation_ok = true;
  double max_sum = 0;
  for (const auto* r : by_rank) {
    // Each rank compared all hashes in-band; checking them here too costs nothing.
    s.consistent = s.consistent && r->consistent && r->result_hash == by_rank[0]->result_hash;
    s.bounds_ok = s.bounds_ok && r->bounds_ok;
    s.conservation_ok = s.conservation_ok && r->conservation_checked;
    s.conservation_max_abs_err = std::max(s.conservation_max_abs_err, r->conservation_max_abs_err);
    max_sum = std::max(max_sum, r->max_abs_sum);
  }
  s.conservation_rel_err = max_sum > 0 ? s.conservation_max_abs_err / max_sum : 0;
  if (integer) {
    s.conservation_ok = s.conservation_ok && s.conservation_max_abs_err == 0;
  } else {
    // Sums are formed in different orders by the algorithm and by dense-ring:
    // allow float rounding of a few additions of values up to max |sum|.
    s.conservation_ok = s.conservation_ok && s.conservation_rel_err <= 1e-5;
  }
  return s;
}

}  // namespace gradex::bench
