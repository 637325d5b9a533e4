#include "services/coordinator/hangs/wait_graph.h"

#include <algorithm>
#include <map>

namespace gradex::coordinator::hangs {

WaitDiagnosis DiagnoseWaits(const std::vector<int>& waits_on) {
  const int p = static_cast<int>(waits_on.size());
  auto next = [&](int r) {
    const int x = waits_on[r];
    return x >= 0 && x < p ? x : -1;
  };
  // Where each rank's chain ends: a sink rank (>= 0) or cycle c (-(c + 1)).
  // Each rank is walked once (state 0 new, 1 on the current path, 2 done).
  std::vector<int> end(p, 0), state(p, 0);
  std::vector<std::vector<int>> cycles;
  std::vector<int> path;
  for (int r = 0; r < p; ++r) {
    if (state[r] != 0) continue;
    path.clear();
    int x = r;
    while (x >= 0 && state[x] == 0) {
      state[x] = 1;
      path.push_back(x);
      x = next(x);
    }
    int res;
    if (x < 0) {
      res = path.back();  // the chain ends at a rank that does not wait
    } else if (state[x] == 1) {
      auto at = std::find(path.begin(), path.end(), x);
      std::vector<int> cyc(at, path.end());
      std::rotate(cyc.begin(), std::min_element(cyc.begin(), cyc.end()), cyc.end());
      cycles.push_back(std::move(cyc));
      res = -static_cast<int>(cycles.size());
    } else {
      res = end[x];
    }
    for (int y : path) state[y] = 2, end[y] = res;
  }
  WaitDiagnosis d;
  std::map<int, WaitCause> sinks;  // ordered by rank
  std::vector<WaitCause> cyc(cycles.size());
  for (size_t c = 0; c < cycles.size(); ++c) cyc[c].ranks = cycles[c];
  for (int r = 0; r < p; ++r) {
    if (next(r) < 0) continue;  // only waiters lead somewhere
    if (end[r] >= 0) {
      WaitCause& w = sinks[end[r]];
      w.ranks = {end[r]};
      w.waiters.push_back(r);
    } else {
      WaitCause& w = cyc[-end[r] - 1];
      if (std::find(w.ranks.begin(), w.ranks.end(), r) == w.ranks.end()) w.waiters.push_back(r);
    }
  }
  for (auto& [rank, w] : sinks) d.causes.push_back(std::move(w));
  std::sort(cyc.begin(), cyc.end(),
            [](const WaitCause& a, const WaitCause& b) { return a.ranks[0] < b.ranks[0]; });
  d.cycles = std::move(cyc);
  return d;
}

}  // namespace gradex::coordinator::hangs
