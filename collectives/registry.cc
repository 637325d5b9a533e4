// The registry of algorithms by the names of DESIGN.md, and the result helpers.
#include <algorithm>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/dense_ring.h"
#include "collectives/oktopk.h"
#include "collectives/peer_algorithms.h"
#include "collectives/sparcml.h"
#include "collectives/spardl.h"
#include "collectives/sparse_allreduce.h"

namespace gradex {
namespace {

using Factory = std::function<std::unique_ptr<SparseAllreduce>()>;

const std::vector<std::pair<std::string, Factory>>& Registry() {
  static const auto* r = new std::vector<std::pair<std::string, Factory>>{
      {"dense-ring", CreateDenseRing},
      {"spardl", CreateSparDL},
      {"spardl-rsag", CreateSparDLRsag},
      {"spardl-bsag", CreateSparDLBsag},
      {"dense-rabenseifner", CreateDenseRabenseifner},
      {"topka", CreateTopkA},
      {"gaussiank", CreateGaussianK},
      {"gtopk", CreateGTopk},
      {"oktopk", [] { return CreateOkTopk(); }},
      {"sparcml-ssar-rd", CreateSparcmlSsarRd},
      {"sparcml-ssar-split", CreateSparcmlSsarSplit},
      {"sparcml-dsar-split", CreateSparcmlDsarSplit},
      {"topkdsa", CreateTopkDsa},
  };
  return *r;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SparseAllreduce>> CreateAllreduce(std::string_view name) {
  for (const auto& [n, f] : Registry()) {
    if (n == name) return f();
  }
  return absl::NotFoundError(absl::StrCat("unknown algorithm '", std::string(name),
                                          "'; known: ", absl::StrJoin(AllreduceNames(), ", ")));
}

std::vector<std::string> AllreduceNames() {
  std::vector<std::string> names;
  for (const auto& entry : Registry()) names.push_back(entry.first);
  return names;
}

void AllreduceResult::ToDense(std::span<float> out) const {
  if (is_dense) {
    std::copy(dense.begin(), dense.begin() + std::min(dense.size(), out.size()), out.begin());
    return;
  }
  kernels::SparseToDense(kernels::View(sparse), 0, out.data(), out.size());
}

size_t AllreduceResult::CountNonZeros() const {
  size_t c = 0;
  if (is_dense) {
    for (float v : dense) c += v != 0.0f;
  } else {
    for (float v : sparse.val) c += v != 0.0f;
  }
  return c;
}

}  // namespace gradex
