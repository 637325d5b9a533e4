#include "catalog/bucket_algorithms.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gradex::catalog {

std::string_view DenseFallbackAlgorithm() { return ReferenceSumAlgorithm(); }

absl::Status CheckBucketAlgorithms(const std::vector<std::string>& names) {
  if (names.size() > kMaxBucketAlgorithms) {
    return absl::InvalidArgumentError(
        absl::StrCat(names.size(), " bucket algorithms (at most ", kMaxBucketAlgorithms, ")"));
  }
  std::vector<std::string_view> distinct;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& n = names[i];
    if (n.empty()) continue;
    const AlgorithmSpec* spec = n.size() > kMaxParamNameBytes ? nullptr : Find(n);
    if (spec == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bucket ", i, ": algorithm '", n.substr(0, kMaxParamNameBytes), "' not in the catalog"));
    }
    if (spec->traits.parameter_server) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bucket ", i, ": '", n, "' is a parameter-server algorithm, not an allreduce"));
    }
    if (std::find(distinct.begin(), distinct.end(), n) == distinct.end()) {
      if (distinct.size() == kMaxDistinctBucketAlgorithms) {
        return absl::InvalidArgumentError(
            absl::StrCat("over ", kMaxDistinctBucketAlgorithms, " distinct bucket algorithms"));
      }
      distinct.push_back(n);
    }
  }
  return absl::OkStatus();
}

std::vector<const AlgorithmSpec*> AlgorithmsInPlay(std::string_view algorithm,
                                                   const std::vector<std::string>& buckets) {
  std::vector<const AlgorithmSpec*> out;
  auto add = [&](std::string_view name) {
    const AlgorithmSpec* s = name.empty() ? nullptr : Find(name);
    if (s != nullptr && std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  };
  add(algorithm);
  for (const std::string& b : buckets) add(b);
  return out;
}

absl::Status CheckParamsInPlay(const std::vector<const AlgorithmSpec*>& specs,
                               const ParamValues& values) {
  if (values.size() > kMaxParams) {
    return absl::InvalidArgumentError(
        absl::StrCat(values.size(), " parameters (at most ", kMaxParams, ")"));
  }
  for (const auto& [name, value] : values) {
    bool known = false;
    for (const AlgorithmSpec* spec : specs) {
      const ParamSpec* p = FindParam(*spec, name);
      if (p == nullptr) continue;
      known = true;
      if (absl::Status st = CheckParam(*p, value); !st.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(spec->name, ": ", st.message()));
      }
    }
    if (!known) {
      std::vector<std::string> in_play;
      for (const AlgorithmSpec* spec : specs) in_play.push_back(spec->name);
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter '", name.substr(0, kMaxParamNameBytes), "' is not one of the parameters of ",
          in_play.empty() ? "(no algorithm)" : absl::StrJoin(in_play, ", ")));
    }
  }
  return absl::OkStatus();
}

}  // namespace gradex::catalog
