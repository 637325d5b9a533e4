#include "member/bucket_choice.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "catalog/catalog.h"

namespace gradex::member {

absl::Status CheckBucketRules(const BucketRules& rules) {
  if (rules.start_iter > kMaxRuleSteps) {
    return absl::InvalidArgumentError(
        absl::StrCat("start_iter ", rules.start_iter, " is over ", kMaxRuleSteps));
  }
  if (rules.dense_probe_period > kMaxRuleSteps) {
    return absl::InvalidArgumentError(
        absl::StrCat("dense_probe_period ", rules.dense_probe_period, " is over ", kMaxRuleSteps));
  }
  if (!(rules.min_compression_rate >= 0 && rules.min_compression_rate <= kMaxMinCompressionRate)) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_compression_rate ", rules.min_compression_rate, " is not in 0..2^30"));
  }
  return absl::OkStatus();
}

bool operator==(const BucketRules& a, const BucketRules& b) {
  return a.start_iter == b.start_iter && a.min_compression_rate == b.min_compression_rate &&
         a.dense_probe_period == b.dense_probe_period && a.refuse_nonfinite == b.refuse_nonfinite &&
         a.hierarchy == b.hierarchy;
}

std::string DenseAlgorithm() { return std::string(catalog::ReferenceSumAlgorithm()); }

BucketChoice ChooseBucketAlgorithm(const Plan& plan, const BucketRules& rules, uint64_t step,
                                   uint32_t bucket, size_t elements) {
  BucketChoice c;
  c.algorithm = bucket < plan.bucket_algorithms.size() && !plan.bucket_algorithms[bucket].empty()
                    ? plan.bucket_algorithms[bucket]
                    : plan.algorithm;
  if (rules.min_compression_rate > 0 && !catalog::TraitsOf(c.algorithm).dense && elements > 0) {
    // Dense sends 4 bytes an element, sparse 8 (index and value) an entry.
    const double k = std::ceil(plan.density * static_cast<double>(elements));
    const double rate = (4.0 * static_cast<double>(elements)) / (8.0 * std::max(k, 1.0));
    if (rate < rules.min_compression_rate) c.algorithm = DenseAlgorithm();
  }
  const bool sparse = !catalog::TraitsOf(c.algorithm).dense;
  const uint64_t period = rules.dense_probe_period;
  if (step < rules.start_iter) {
    // The warm-up runs dense; with probes on, its odd steps also time the
    // sparse exchange the bucket is planned to run (its even steps are the
    // dense samples).
    if (period > 0 && sparse && step % 2 == 1) {
      c.sparse_probe = true;
      c.probe_algorithm = std::move(c.algorithm);
    }
    c.algorithm = DenseAlgorithm();
    return c;
  }
  // A sparse bucket's dense exchange is timed beside it (the agent's shadow
  // probe); a dense bucket times itself.
  c.dense_probe = period > 0 && step % period == period - 1 && sparse;
  return c;
}

}  // namespace gradex::member
