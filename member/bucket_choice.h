// Which algorithm one bucket of a step runs: the plan's per-bucket choice
// (Plan::bucket_algorithms, agreed at plan barriers), else the plan's
// algorithm, then the per-bucket rules (start_iter, min_compression_rate,
// dense_probe_period; "never slower than dense"). Each rank is given
// its rules (the hook's arguments), but every rank of an epoch applies the
// rules agreed in-band at its entry, the lowest rank's (epoch_sync.h), so a
// rank given other values cannot run another algorithm for a bucket.
#ifndef GRADEX_MEMBER_BUCKET_CHOICE_H_
#define GRADEX_MEMBER_BUCKET_CHOICE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "member/control_plane.h"

namespace gradex::member {

struct BucketRules {
  // Steps [0, start_iter) run the dense algorithm for every bucket (as
  // PowerSGD's start_powerSGD_iter). With dense_probe_period > 0, a bucket
  // planned sparse also times its sparse exchange on the odd steps of this
  // warm-up (sparse_probe), so the bucket controller can choose its side
  // before it ever runs sparse: a switch from sparse to dense in mid-training
  // costs accuracy (docs/measurements.md), one from dense to sparse does not.
  uint64_t start_iter = 0;
  // A bucket of n elements at density d stays dense when a sparse exchange
  // would send less than this factor fewer bytes: (4n) / (8 ceil(d n)) < rate.
  // 0: never.
  double min_compression_rate = 0;
  // At steps >= start_iter with step % period == period - 1 every sparse
  // bucket's dense exchange is timed once, against its sparse exchange (the
  // report marks it dense_probe). The probe exchanges zeros beside the
  // bucket's own exchange, which runs as on any step: the training never
  // sees a probe (a dense step would flush every residual at once). 0: never.
  uint64_t dense_probe_period = 0;
  // Received NaN and infinite values are refused as bad frames, blaming
  // their sender; each rank exchanges its own as 0 (ClientOptions::
  // refuse_nonfinite). Off: they are summed like any value.
  bool refuse_nonfinite = true;
  // The hierarchical exchange (dense inside a node, sparse across nodes)
  // where the epoch's layout allows it (catalog::Hierarchical); off: flat.
  bool hierarchy = true;
};

// Bounds of the rules, on options and on the wire. 2^32 steps is beyond any
// training run; the client's buckets hold at most 2^31 elements, so no
// bucket has a compression rate above 4 * 2^31 / 8 = 2^30.
inline constexpr uint64_t kMaxRuleSteps = uint64_t{1} << 32;
inline constexpr double kMaxMinCompressionRate = 1073741824.0;  // 2^30

// INVALID_ARGUMENT naming the first field out of its bounds: start_iter and
// dense_probe_period in 0..2^32, min_compression_rate finite in 0..2^30.
absl::Status CheckBucketRules(const BucketRules& rules);

bool operator==(const BucketRules& a, const BucketRules& b);

struct BucketChoice {
  std::string algorithm;     // what the bucket's exchange runs
  bool dense_probe = false;  // also time a dense exchange of its size (never for a dense one)
  // A warm-up step (BucketRules::start_iter) of a bucket planned sparse:
  // also time `probe_algorithm`, the sparse exchange it would run, on a copy
  // of its gradient (the residual untouched: the training never sees it).
  bool sparse_probe = false;
  std::string probe_algorithm;
};

// The dense algorithm the rules fall back to: the catalog's reference sum
// (dense-ring).
std::string DenseAlgorithm();

BucketChoice ChooseBucketAlgorithm(const Plan& plan, const BucketRules& rules, uint64_t step,
                                   uint32_t bucket, size_t elements);

}  // namespace gradex::member

#endif  // GRADEX_MEMBER_BUCKET_CHOICE_H_
