#include "services/coordinator/hangs/wait_graph.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

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

EpochWaits ScanWaits(const membership::Membership& m, const membership::Epoch& run,
                     absl::Time now) {
  EpochWaits w;
  const int p = static_cast<int>(run.roster.size());
  w.waits_on.assign(p, -1);
  for (int r = 0; r < p; ++r) {
    const membership::MemberRecord* rec = m.Find(run.roster[r]);
    if (rec == nullptr || !rec->waiting) continue;
    const gradex::v1::WaitState& ws = rec->wait;
    if (ws.epoch() != run.number || ws.step() < rec->next_step) continue;
    if (ws.peer_rank() < 0 || ws.peer_rank() >= p) continue;
    w.waits_on[r] = ws.peer_rank();
    const absl::Duration age = absl::Milliseconds(ws.waited_ms()) + (now - rec->last_heartbeat);
    w.step = w.any ? std::min<uint64_t>(w.step, ws.step()) : ws.step();
    w.oldest = w.any ? std::max(w.oldest, age) : age;
    w.any = true;
  }
  return w;
}

namespace {

std::string Ranks(const std::vector<int>& ranks, const char* sep = ", ") {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(ranks, sep));
}

std::string Who(const membership::Membership& m, const membership::Epoch& run, int rank) {
  const membership::MemberRecord* rec = m.Find(run.roster[rank]);
  if (rec == nullptr) return absl::StrCat("rank ", rank, " (member ", run.roster[rank], ")");
  return absl::StrCat("rank ", rank, " (host '", rec->host, "', agent '", rec->agent_id, "')");
}

}  // namespace

std::string DescribeHang(const membership::Membership& m, const membership::Epoch& run,
                         const EpochWaits& w, absl::Time now, absl::Duration silence) {
  if (!w.any) return "";
  const WaitDiagnosis d = DiagnoseWaits(w.waits_on);
  std::vector<std::string> parts;
  for (const WaitCause& c : d.causes) {
    const int r = c.ranks[0];
    const membership::MemberRecord* rec = m.Find(run.roster[r]);
    std::string why;
    if (rec == nullptr) {
      why = "is gone (lease expired or left)";
    } else if (now - rec->last_heartbeat > silence) {
      why = absl::StrCat(
          "stopped heartbeating ",
          absl::FormatDuration(absl::Trunc(now - rec->last_heartbeat, absl::Milliseconds(1))),
          " ago");
    } else if (rec->epoch != 0 && rec->epoch < run.number) {
      why = absl::StrCat("still runs epoch ", rec->epoch);
    } else if (rec->next_step < w.step) {
      why = absl::StrCat("is still in step ", rec->next_step);
    } else if (rec->next_step > w.step) {
      why = absl::StrCat("is past step ", w.step, " (next step ", rec->next_step, ")");
    } else {
      why = absl::StrCat("is not in the exchange of step ", w.step);
    }
    parts.push_back(absl::StrCat(Who(m, run, r), " ", why, ": ", Ranks(c.waiters), " wait",
                                 c.waiters.size() == 1 ? "s" : "", " on it"));
  }
  for (const WaitCause& c : d.cycles) {
    std::vector<int> loop = c.ranks;
    loop.push_back(c.ranks[0]);
    std::string s = absl::StrCat(Ranks(loop, " -> "), " wait on each other (a cycle)");
    if (!c.waiters.empty()) {
      absl::StrAppend(&s, "; ", Ranks(c.waiters), c.waiters.size() == 1 ? " waits" : " wait",
                      " on them");
    }
    parts.push_back(std::move(s));
  }
  // Members that never entered this epoch hold up its entry and barriers.
  std::vector<std::string> older;
  for (size_t r = 0; r < run.roster.size(); ++r) {
    const membership::MemberRecord* rec = m.Find(run.roster[r]);
    const bool named = std::any_of(d.causes.begin(), d.causes.end(), [&](const WaitCause& c) {
      return c.ranks[0] == static_cast<int>(r);
    });
    if (!named && rec != nullptr && rec->epoch != 0 && rec->epoch < run.number) {
      older.push_back(absl::StrCat(r, " (epoch ", rec->epoch, ")"));
    }
  }
  if (!older.empty()) {
    parts.push_back(absl::StrCat(older.size() == 1 ? "rank " : "ranks ", absl::StrJoin(older, ", "),
                                 " still run", older.size() == 1 ? "s" : "", " an older epoch"));
  }
  return absl::StrJoin(parts, "; ");
}

}  // namespace gradex::coordinator::hangs
