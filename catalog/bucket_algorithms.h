// Per-bucket algorithms (Plan.bucket_algorithms): the bounds a plan and the
// agents' barrier agreement enforce on them, and the parameter check for a
// plan that runs more than one algorithm. Shared by the coordinator (which
// builds such plans) and the agents (which refuse plans and barrier messages
// outside these bounds), so the two cannot drift apart.
#ifndef GRADEX_CATALOG_BUCKET_ALGORITHMS_H_
#define GRADEX_CATALOG_BUCKET_ALGORITHMS_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "catalog/catalog.h"

namespace gradex::catalog {

// A step's buckets, as the report's (services/coordinator/limits.h).
inline constexpr size_t kMaxBucketAlgorithms = 4096;
// Distinct names among them: the catalog's algorithms, with room to grow.
inline constexpr size_t kMaxDistinctBucketAlgorithms = 32;

// The dense algorithm a bucket falls back to when its sparse exchange loses
// to a dense one, and the one dense probes run: dense, exact on integers, no
// parameters (the reference sum).
std::string_view DenseFallbackAlgorithm();

// OK when there are at most kMaxBucketAlgorithms entries, at most
// kMaxDistinctBucketAlgorithms distinct names, each "" or a catalog name;
// else INVALID_ARGUMENT naming the first bad entry.
absl::Status CheckBucketAlgorithms(const std::vector<std::string>& names);

// The catalog entries of `algorithm` and of every non-empty bucket name,
// each once (unknown names are skipped).
std::vector<const AlgorithmSpec*> AlgorithmsInPlay(std::string_view algorithm,
                                                   const std::vector<std::string>& buckets);

// OK when every entry of `values` is a parameter of at least one of `specs`,
// with a value valid for each of them that has it (so every algorithm in
// play reads a valid value); at most kMaxParams entries.
absl::Status CheckParamsInPlay(const std::vector<const AlgorithmSpec*>& specs,
                               const ParamValues& values);

}  // namespace gradex::catalog

#endif  // GRADEX_CATALOG_BUCKET_ALGORITHMS_H_
