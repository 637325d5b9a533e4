// Which algorithm one bucket of a step runs: the plan's per-bucket choice
// (Plan::bucket_algorithms, agreed at plan barriers), else the plan's
// algorithm, then the client-local rules every rank applies alike because
// every rank is given the same options (start_iter, min_compression_rate,
// dense_probe_period; issue 9, "never slower than dense").
#ifndef GRADEX_SERVICES_AGENT_BUCKET_CHOICE_H_
#define GRADEX_SERVICES_AGENT_BUCKET_CHOICE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "services/agent/control_plane.h"

namespace gradex::agent {

struct BucketRules {
  // Steps [0, start_iter) run the dense algorithm for every bucket (as
  // PowerSGD's start_powerSGD_iter).
  uint64_t start_iter = 0;
  // A bucket of n elements at density d stays dense when a sparse exchange
  // would send less than this factor fewer bytes: (4n) / (8 ceil(d n)) < rate.
  // 0: never.
  double min_compression_rate = 0;
  // At steps >= start_iter with step % period == period - 1 every bucket runs
  // dense once, to be timed against its sparse exchange (the report marks it
  // dense_probe). 0: never.
  uint64_t dense_probe_period = 0;
};

struct BucketChoice {
  std::string algorithm;
  bool dense_probe = false;
};

// The dense algorithm the rules fall back to: the catalog's reference sum
// (dense-ring).
std::string DenseAlgorithm();

BucketChoice ChooseBucketAlgorithm(const Plan& plan, const BucketRules& rules, uint64_t step,
                                   uint32_t bucket, size_t elements);

}  // namespace gradex::agent

#endif  // GRADEX_SERVICES_AGENT_BUCKET_CHOICE_H_
