// An epoch's waits and the hang's cause from the members' heartbeats
// (hang_scan.h).
#include "services/coordinator/hang_scan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "services/coordinator/hangs/wait_graph.h"

namespace gradex::coordinator {

using hangs::DiagnoseWaits;
using hangs::WaitCause;
using hangs::WaitDiagnosis;

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

}  // namespace gradex::coordinator
