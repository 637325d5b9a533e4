// COVAP's CCR profiler (the covap seed, §III.B; docs/design.md "COVAP"):
// the interval I of COVAP's coarse-grained filter should equal the job's
// communication-to-computation ratio, I = ceil(CCR), so that the exchange
// that is left after filtering hides behind the trainer's computation.
// - communication, per step: the shortest (end - start) of the exchange over
//   ranks (the paper's distributed profiler aligns the ranks' timelines at
//   the end of the communication: an early rank's wait for the others is not
//   communication), scaled to the uncompressed exchange: a step that ran
//   COVAP at interval I sent about 1/I of the gradient, so its time counts
//   I times (a dense step counts once);
// - computation, per step: the mean over ranks of the trainer's time outside
//   the exchange since its previous step (forward + backward);
// - CCR = median(communication) / median(computation) over a window of the
//   latest complete steps (every rank reported: reports may be dropped), once
//   at least `min_steps` are in; I changes when ceil(CCR) leaves the current
//   interval by a margin (10%: a CCR hovering at an integer must not flip I
//   at every step) and is bounded by `max_interval`.
// Pure logic: no locks, no clock (the Coordinator serialises calls).
#ifndef GRADEX_SERVICES_COORDINATOR_CONTROLLERS_CCR_PROFILER_H_
#define GRADEX_SERVICES_COORDINATOR_CONTROLLERS_CCR_PROFILER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <vector>

namespace gradex::coordinator::controllers {

// The largest interval the profiler publishes. Past it each part of the
// gradient waits more than 16 steps for its turn: the staleness the covap
// seed warns makes accuracy decline (§VI), where error-feedback top-k
// sparsifiers (the catalog's other algorithms) are the better tool; the seed's
// measured CCRs stay under 5 at 30-100 Gbit/s.
inline constexpr int kMaxCovapInterval = 16;

class CcrProfiler {
 public:
  // `start`: the interval before any measurement (the job config's).
  CcrProfiler(int world, int min_steps, int start, int max_interval = kMaxCovapInterval,
              int window = 32, double margin = 0.10);
  // One rank's step: its exchange's seconds (end - start on its clock), its
  // computation seconds, and the COVAP interval the step ran with (1 for an
  // uncompressed exchange). Returns true when interval() changed.
  bool Feed(int rank, uint64_t step, double exchange_seconds, double compute_seconds,
            int ran_interval);
  int interval() const { return interval_; }
  double ccr() const { return ccr_; }  // 0 until measured
  int samples() const { return static_cast<int>(comm_.size()); }

 private:
  struct StepAcc {
    double min_comm = 0;
    double sum_compute = 0;
    std::vector<bool> seen;
    int count = 0;
  };
  const int world_, min_steps_, max_interval_, window_;
  const double margin_;
  std::map<uint64_t, StepAcc> open_;
  std::deque<double> comm_, compute_;
  int interval_;
  bool measured_ = false;
  double ccr_ = 0;
};

}  // namespace gradex::coordinator::controllers

#endif  // GRADEX_SERVICES_COORDINATOR_CONTROLLERS_CCR_PROFILER_H_
