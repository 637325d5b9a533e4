// The Coordinator's stall checks: a step the running epoch's ranks have not
// all reached in time, or a hang named by the heartbeats' waits, logged and blamed.
#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "services/coordinator/coordinator.h"
#include "services/coordinator/hang_scan.h"
#include "services/coordinator/hangs/wait_graph.h"
#include "services/coordinator/log.h"

namespace gradex::coordinator {

void Coordinator::CheckStallsLocked(absl::Time now) {
  if (!membership_.has_epoch()) return;
  // The running epoch: the newest whose effective step some member reached.
  const membership::Epoch* run = &membership_.latest();
  const uint64_t furthest = membership_.MaxNextStep();
  for (uint64_t n = run->number; run->effective_step > furthest && n > 1;) {
    const membership::Epoch* older = membership_.FindEpoch(--n);
    if (older == nullptr) break;
    run = older;
  }
  std::vector<uint64_t> progress;
  for (uint64_t id : run->roster) {
    const membership::MemberRecord* m = membership_.Find(id);
    // A lost member is the next epoch's business; its rank is not waited on.
    progress.push_back(m ? std::max(m->next_step, run->effective_step) : 0);
  }
  if (progress.size() != run->roster.size()) return;
  int behind = 0;
  std::optional<hangs::Stall> st = stalls_.Check(progress, now, &behind);
  if (metrics_) metrics_->stalled_ranks.Set(behind);
  // Heartbeats' waits: a name for a hang in which nobody is behind (every
  // rank stuck in one step), and whom the laggards' peers wait on.
  const EpochWaits waits = ScanWaits(membership_, *run, now);
  // Silent: two heartbeat intervals (lease / 3 each) without one.
  const absl::Duration silence = s_.lease * 2 / 3;
  const bool from_waits = waits.any && stalls_.CheckWaits(waits.step, waits.oldest, now);
  if (from_waits) {
    ++stalled_steps_;
    if (metrics_) metrics_->stalled_steps.Increment();
    Log("step ", waits.step, " stalled in epoch ", run->number, " (waiting for ",
        absl::FormatDuration(absl::Trunc(waits.oldest, absl::Milliseconds(1))),
        "): ", DescribeHang(membership_, *run, waits, now, silence));
    // Blamed: where the waits end (a rank not in the exchange), or a cycle's ranks.
    std::vector<int> blamed;
    const hangs::WaitDiagnosis d = hangs::DiagnoseWaits(waits.waits_on);
    for (const auto* list : {&d.causes, &d.cycles}) {
      for (const hangs::WaitCause& c : *list)
        blamed.insert(blamed.end(), c.ranks.begin(), c.ranks.end());
    }
    BlameLocked(*run, blamed);
  }
  if (!st) return;
  if (!st->diagnosed && !(from_waits && st->step == waits.step)) {  // else counted from the waits
    ++stalled_steps_;
    if (metrics_) metrics_->stalled_steps.Increment();
    BlameLocked(*run, st->ranks);  // the laggards
  }
  std::vector<std::string> who;
  for (size_t i = 0; i < st->ranks.size(); ++i) {
    const membership::MemberRecord* m = membership_.Find(run->roster[st->ranks[i]]);
    who.push_back(absl::StrCat(st->ranks[i], " (", m ? m->host : "?", ", next step ",
                               st->next_steps[i], ")"));
  }
  Log("step ", st->step, " stalled in epoch ", run->number, ": ranks ", absl::StrJoin(who, ", "),
      " have not arrived (the furthest rank finished step ", st->frontier - 1, ")",
      waits.any ? "; " : "", DescribeHang(membership_, *run, waits, now, silence));
}

void Coordinator::BlameLocked(const membership::Epoch& run, const std::vector<int>& ranks) {
  if (!metrics_) return;
  for (int r : ranks) {
    if (r < 0 || static_cast<size_t>(r) >= run.roster.size()) continue;
    const membership::MemberRecord* m = membership_.Find(run.roster[r]);
    metrics_->BlameStall(r, m ? m->host : "");
  }
}

}  // namespace gradex::coordinator
