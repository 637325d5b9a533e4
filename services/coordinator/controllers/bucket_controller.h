// The per-bucket algorithm choice (Plan.bucket_algorithms), fed by step
// reports. Two rules, in this order:
// - "never slower than dense": per bucket index, the median over a window
//   of steps of the slowest rank's sparse exchange is compared with the same
//   for dense exchanges (the agents' dense probes, or the bucket's own runs
//   once it is dense; in a warm-up with probes on, its dense steps against
//   the sparse probes of its odd steps, so the side is chosen before the
//   bucket runs sparse); the bucket runs the catalog's dense algorithm once
//   dense wins by the margin, and goes back once sparse wins by it;
// - "auto" (job algorithm "auto"): otherwise the catalog algorithm whose
//   Table 1 row (catalog/cost_rows.h) prices the bucket's n cheapest at this
//   density, P, team count and the links' α and β (the maxima over the
//   epoch's ranks, once every rank's probe is in; before any, a stated
//   default).
// A bucket in a warm-up (its own dense runs reported while it is planned
// sparse, the agents' sparse probes on the odd steps between them) gets one
// verdict, with no confirming window: the first time both sides hold
// warmup_window samples, dense wins if faster by the margin, else sparse
// stays (a near tie is not worth the bytes, and would choose differently
// from run to run). It has not run sparse yet, so either side costs no
// accuracy, and a verdict taken once cannot flip (a new sparse algorithm gets one too, while the
// warm-up lasts). A bucket given a verdict never switches from sparse to
// dense afterwards: that switch costs accuracy (docs/measurements.md, "A
// bucket's side chosen in a timed warm-up"), and its speed was weighed in
// the warm-up; from dense it goes back to sparse by the rules below, which
// costs none. A bucket with no warm-up (start_iter 0) keeps all the rules.
// A choice changes only on a clear, lasting difference, so that timings
// around equality do not flip a bucket at every barrier: the side that runs
// is judged once per full window of samples taken since its switch was
// applied (never twice on the same samples), a switch needs
// confirm_windows consecutive windows that favour it, and after a switch
// the bucket holds for a dwell that doubles with each switch (30 s, 60 s,
// ... 1 h): at most 7 switches in a bucket's first hour, then one an hour.
//
// A decision is not applied when it is taken: it waits (PendingSince) until
// the Coordinator publishes it at a plan barrier and calls Apply. The
// Coordinator picks that barrier from the step whose samples decided
// (NextBarrier(decided step + lead)), not from when the report arrived, so
// two runs whose timings give the same decisions switch at the same steps
// and end with the same parameters; only when the ranks are already past
// that barrier (a loaded coordinator) does a switch go out later. What
// stays tied to the clock: the end of a dwell (so a switch back after one
// falls in the first window whose samples close after it), and the
// agents' in-band agreement on a plan version they hold. Steps are counted
// from the agents' reports, and the agents choose nothing from time.
//
// "" for a bucket means the plan's own algorithm. Pure logic: no locks, no
// clock reads (`now` is passed in; the Coordinator serialises calls); every
// input is bounded before it is stored.
#ifndef GRADEX_SERVICES_COORDINATOR_CONTROLLERS_BUCKET_CONTROLLER_H_
#define GRADEX_SERVICES_COORDINATOR_CONTROLLERS_BUCKET_CONTROLLER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"

namespace gradex::coordinator::controllers {

struct BucketControllerOptions {
  // Hysteresis: a switch needs the winner faster by this fraction, both
  // ways (10%: above the step-to-step jitter of a loaded host's exchange).
  double margin = 0.10;
  // The side that runs is judged on windows of this many of its samples,
  // each taken after its switch was applied and after the last judgement: a
  // median of 8 outvotes a few outliers, and a decision never rests on the
  // samples of the one before.
  int window = 8;
  // Samples of the side that does not run (dense probes come every
  // dense_probe_period steps; no sparse ones while dense runs) needed first.
  int min_samples = 3;
  // Consecutive windows that must favour a switch: one window's median can
  // pass the margin on a load burst of a few steps; a lasting difference
  // shows in each.
  int confirm_windows = 2;
  // The samples of each side a warm-up's verdict is taken on: twice a window,
  // since nothing confirms it; decided by step 31 of a warm-up (step 159 when
  // the link probes change the sparse algorithm at 128), applied at the
  // barrier 128 steps later, before auto's 384.
  int warmup_window = 16;
  // After its n-th switch a bucket holds for dwell * 2^(n-1), at most
  // max_dwell. 30 s outlasts a shared host's load swings (a neighbour's
  // burst, a checkpoint), so one swing switches a bucket once, not back and
  // forth; doubling makes a bucket whose sides are about equal settle (at
  // most 7 switches in its first hour); the cap still follows a machine
  // that really changed within the hour.
  absl::Duration dwell = absl::Seconds(30);
  absl::Duration max_dwell = absl::Hours(1);
  // The auto choice's link cost before every rank measured one: 50 µs per
  // message and 10 Gbit/s (0.8 ns per byte), a datacentre TCP link.
  double default_alpha = 50e-6;
  double default_beta = 8e-10;
};

// One bucket of one rank's step report.
struct BucketSample {
  uint64_t elements = 0;
  std::string algorithm;  // what ran ("" = the plan's)
  double seconds = 0;
  bool dense_probe = false;
};

// A bucket's fallback switch, for the log and the metric.
struct BucketSwitch {
  uint32_t bucket = 0;
  bool to_dense = false;
  double sparse_seconds = 0;  // the medians compared
  double dense_seconds = 0;
  int sparse_samples = 0, dense_samples = 0;  // what each median is over
  uint64_t decided_step = 0;                  // the step whose sample completed the window
  int switches = 0;                           // this bucket's switches, this one included
  absl::Duration hold;                        // no other switch of the bucket for this long
  bool warmup = false;                        // the warm-up's verdict
};

// The cheapest catalog algorithm with a Table 1 row that runs on P ranks in
// T teams, for n elements at `density`; rows that give a range are priced
// at their upper end (selections of different ranks overlap little at low
// density, and a tie should go to the algorithm whose cost is certain).
// COVAP's row is priced at `covap_interval` (0: its catalog default).
std::string CheapestAlgorithm(int world, int teams, uint64_t elements, double density, double alpha,
                              double beta, double* seconds = nullptr, int covap_interval = 0);
// The price of `algorithm` on the same terms (HUGE_VAL without a row, or
// when it cannot run on P ranks in T teams).
double ModelSeconds(const std::string& algorithm, int world, int teams, uint64_t elements,
                    double density, double alpha, double beta, int covap_interval = 0);

class BucketController {
 public:
  static constexpr uint64_t kNone = ~uint64_t{0};

  explicit BucketController(BucketControllerOptions options = {}) : o_(options) {}

  // A new epoch (or job start, or a new team count), running from step
  // `from`: the plan's algorithm, whether the job is "auto", density, P and
  // T. Decisions still pending apply from `from` (the epoch's plan carries
  // them). Keeps per-bucket timings, dwells and the last epoch's link
  // estimate when P and T are unchanged; a new P or T starts afresh.
  void Configure(const std::string& plan_algorithm, bool auto_choice, double density, int world,
                 int teams, uint64_t from);
  // Rank `rank`'s link estimate, on its report of `step`. Once every rank of
  // the epoch gave one, their maxima are used (a synchronous step pays for
  // its slowest link, as the automatic team count reasons) and the auto
  // choice is made again, decided by the step of the report that completed
  // them: one change per epoch, not one per arriving probe.
  void FeedLink(int rank, uint64_t step, double alpha, double beta);
  // COVAP's interval in the plan (the CCR profiler's, decided by the report
  // of `step`), which prices its row.
  void SetCovapInterval(int interval, uint64_t step);
  // One rank's buckets of one step. Reports may be dropped or come late; a
  // step counts once every rank of the epoch reported it, and a decision
  // its samples complete is taken then, with `now` (the dwells).
  void Feed(int rank, uint64_t step, const std::vector<BucketSample>& buckets, absl::Time now);

  // The earliest step whose samples decided a change not yet applied
  // (kNone: none).
  uint64_t PendingSince() const;
  // Applies the changes decided by samples of steps <= decided_by, running
  // from step `from` (the plan barrier that carries them): Choices() shows
  // them, and a bucket that switched gathers its fresh samples from `from`.
  void Apply(uint64_t decided_by, uint64_t from);

  // The applied choice per bucket index ("" = the plan's algorithm),
  // without trailing "" entries.
  std::vector<std::string> Choices() const;
  // Fallback switches decided since the last call.
  std::vector<BucketSwitch> TakeSwitches();
  // Warm-up verdicts that kept a bucket sparse since the last call (for the
  // log: to_dense false, switches unchanged).
  std::vector<BucketSwitch> TakeKeptSparse();
  int dense_buckets() const;  // applied
  double alpha() const { return alpha_ > 0 ? alpha_ : o_.default_alpha; }
  double beta() const { return beta_ > 0 ? beta_ : o_.default_beta; }

 private:
  struct Bucket {
    uint64_t elements = 0;
    std::string sparse_algorithm;  // what the sparse samples ran
    std::deque<double> sparse, dense;
    // What the samples decided, and what is applied (Choices()).
    bool fallback = false, applied_fallback = false;
    std::string auto_choice, applied_auto;
    uint64_t decided_step = kNone;  // a change waits for Apply
    // The running side's samples count from this step (kNone while its
    // switch waits for Apply); `fresh` of them since the last judgement.
    uint64_t fresh_from = 0;
    int fresh = 0;
    int votes = 0;  // consecutive windows favouring a switch
    // The last step whose own run was dense while the bucket was planned
    // sparse (a warm-up), and whether the warm-up's verdict on the current
    // sparse algorithm was taken.
    uint64_t warmup_step = kNone;
    bool verdict = false;
    bool warmed = false;  // a verdict was taken (for any sparse algorithm)
    int switches = 0;
    absl::Time hold_until = absl::InfinitePast();
  };
  struct Slot {  // one bucket of one step, over the ranks that reported it
    uint64_t elements = 0;
    std::string algorithm;
    bool dense = false;
    bool own_dense = false;  // dense, and the bucket's own run (not a probe)
    bool valid = true;
    double slowest = 0;
    int ranks = 0;
  };
  struct Open {  // one step's reports so far
    std::vector<Slot> slots;
    std::vector<bool> seen;
    int count = 0;
  };
  void Close(uint64_t step, const Open& o, absl::Time now);
  void Decide(uint32_t index, Bucket& b, uint64_t step, absl::Time now);
  // Prices the bucket again; a change is pending from `step`.
  void ChooseAuto(Bucket& b, uint64_t step) const;
  static void MarkPending(Bucket& b, uint64_t step);
  // Whether `b` is in a warm-up whose verdict on its sparse algorithm is not
  // taken yet (its own dense run at most two steps back: one report may be
  // dropped), and how many samples a side that verdict keeps and needs.
  static bool Warming(const Bucket& b, uint64_t step);
  size_t WarmupWindow() const;
  // What a judgement of `b` at `step` compared, for the log (the caller
  // sets to_dense, hold and warmup).
  static BucketSwitch Judged(uint32_t index, const Bucket& b, double sparse, double dense,
                             uint64_t step);
  absl::Duration HoldAfter(int switches) const;

  const BucketControllerOptions o_;
  std::string algorithm_;
  bool auto_ = false;
  double density_ = 0.01;
  int world_ = 0;
  int teams_ = 1;
  int covap_interval_ = 0;

  double alpha_ = 0, beta_ = 0;                   // the maxima of the last complete set of probes
  std::vector<std::pair<double, double>> links_;  // this epoch's, by rank (0: none yet)
  int links_in_ = 0;
  uint64_t links_step_ = 0;  // the latest step a rank's first probe came on
  std::vector<Bucket> buckets_;
  std::map<uint64_t, Open> open_;  // by step
  std::vector<BucketSwitch> switches_, kept_sparse_;
};

}  // namespace gradex::coordinator::controllers

#endif  // GRADEX_SERVICES_COORDINATOR_CONTROLLERS_BUCKET_CONTROLLER_H_
