// The per-bucket algorithm choice (Plan.bucket_algorithms), fed by step
// reports. Two rules, in this order:
// - "never slower than dense": per bucket index, the median over recent
//   steps of the slowest rank's sparse exchange is compared with the same
//   for dense exchanges (the agents' dense probes, or the bucket's own runs
//   once it is dense); the bucket runs the catalog's dense algorithm while
//   dense wins by the margin, and goes back when sparse wins by it;
// - "auto" (job algorithm "auto"): otherwise the catalog algorithm whose
//   Table 1 row (catalog/table1.h) prices the bucket's n cheapest at this
//   density, P, team count and the links' α and β (the agents' probes;
//   before any, a stated default).
// "" for a bucket means the plan's own algorithm. Pure logic: no locks, no
// clock (the Coordinator serialises calls); every input is bounded before it
// is stored.
#ifndef GRADEX_SERVICES_COORDINATOR_BUCKET_CONTROLLER_H_
#define GRADEX_SERVICES_COORDINATOR_BUCKET_CONTROLLER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

namespace gradex::coordinator {

struct BucketControllerOptions {
  // Hysteresis: a switch needs the winner faster by this fraction, both
  // ways (10%: above the step-to-step jitter of a loaded host's exchange).
  double margin = 0.10;
  // Samples of each kind before a comparison, and the window of recent
  // steps a median is taken over (probes come every dense_probe_period
  // steps, so a few are enough to outvote one outlier).
  int min_samples = 3;
  int window = 8;
  // The auto choice's link cost before any agent measured one: 50 µs per
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
  explicit BucketController(BucketControllerOptions options = {}) : o_(options) {}

  // A new epoch (or job start): the plan's algorithm, whether the job is
  // "auto", density, P and T. Keeps per-bucket timings when P and T are
  // unchanged; a new P or T starts afresh.
  void Configure(const std::string& plan_algorithm, bool auto_choice, double density, int world,
                 int teams);
  // A rank's link estimate; the maximum over ranks is used (a synchronous
  // step pays for its slowest link, as the automatic team count reasons).
  void FeedLink(double alpha, double beta);
  // COVAP's interval in the plan (the CCR profiler's), which prices its row.
  void SetCovapInterval(int interval);
  // One rank's buckets of one step. Reports may be dropped or come late;
  // a step counts once every rank of the epoch reported it.
  void Feed(int rank, uint64_t step, const std::vector<BucketSample>& buckets);

  // The current choice per bucket index ("" = the plan's algorithm),
  // without trailing "" entries.
  std::vector<std::string> Choices() const;
  // Fallback switches since the last call.
  std::vector<BucketSwitch> TakeSwitches();
  int dense_buckets() const;
  double alpha() const { return alpha_ > 0 ? alpha_ : o_.default_alpha; }
  double beta() const { return beta_ > 0 ? beta_ : o_.default_beta; }

 private:
  struct Bucket {
    uint64_t elements = 0;
    std::string sparse_algorithm;  // what the sparse samples ran
    std::deque<double> sparse, dense;
    bool fallback = false;
    std::string auto_choice;
  };
  struct Slot {  // one bucket of one step, over the ranks that reported it
    uint64_t elements = 0;
    std::string algorithm;
    bool dense = false;
    bool valid = true;
    double slowest = 0;
    int ranks = 0;
  };
  struct Open {  // one step's reports so far
    std::vector<Slot> slots;
    std::vector<bool> seen;
    int count = 0;
  };
  void Close(const Open& step);
  void Decide(uint32_t index, Bucket& b);
  void ChooseAuto(Bucket& b) const;

  const BucketControllerOptions o_;
  std::string algorithm_;
  bool auto_ = false;
  double density_ = 0.01;
  int world_ = 0;
  int teams_ = 1;
  int covap_interval_ = 0;

  double alpha_ = 0, beta_ = 0;
  bool links_fresh_ = false;  // alpha_, beta_ come from this epoch's probes
  std::vector<Bucket> buckets_;
  std::map<uint64_t, Open> open_;  // by step
  std::vector<BucketSwitch> switches_;
};

}  // namespace gradex::coordinator

#endif  // GRADEX_SERVICES_COORDINATOR_BUCKET_CONTROLLER_H_
