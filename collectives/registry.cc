// The factory registry: catalog names to schedules, filled by each
// algorithm's static registrar (GRADEX_REGISTER_ALGORITHM).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/sparse_allreduce.h"

namespace gradex::collectives {
namespace {

struct Factories {
  std::mutex mu;
  std::map<std::string, AllreduceFactory, std::less<>> by_name;
};

Factories& TheFactories() {
  static Factories* f = new Factories;
  return *f;
}

}  // namespace

AlgorithmTraits SparseAllreduce::traits() const {
  const catalog::AlgorithmSpec* spec = catalog::Find(name());
  return spec == nullptr ? AlgorithmTraits{} : spec->traits;
}

wire::AlgorithmId SparseAllreduce::id() const { return wire::CatalogId(name()); }

double SparseAllreduce::Param(const AllreduceOptions& options, std::string_view name) const {
  return catalog::ParamOr(catalog::Find(this->name()), options.params, name);
}

absl::Status RegisterAlgorithm(std::string_view name, AllreduceFactory factory) {
  if (catalog::Find(name) == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "algorithm '", std::string(name), "' has no catalog entry; known: ", catalog::NameList()));
  }
  Factories& f = TheFactories();
  std::lock_guard<std::mutex> lock(f.mu);
  if (!f.by_name.emplace(std::string(name), std::move(factory)).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("algorithm '", std::string(name), "' registered twice"));
  }
  return absl::OkStatus();
}

bool internal::RegisterOrDie(std::string_view name, AllreduceFactory factory) {
  absl::Status st = RegisterAlgorithm(name, std::move(factory));
  if (!st.ok()) {
    std::fprintf(stderr, "gradex: %s\n", std::string(st.message()).c_str());
    std::abort();
  }
  return true;
}

absl::StatusOr<std::unique_ptr<SparseAllreduce>> CreateAllreduce(std::string_view name) {
  AllreduceFactory factory;
  {
    Factories& f = TheFactories();
    std::lock_guard<std::mutex> lock(f.mu);
    auto it = f.by_name.find(name);
    if (it != f.by_name.end()) factory = it->second;
  }
  if (!factory || catalog::Find(name) == nullptr) {
    std::string known;
    for (const std::string& n : AllreduceNames())
      absl::StrAppend(&known, known.empty() ? "" : ", ", n);
    return absl::NotFoundError(
        absl::StrCat("unknown algorithm '", std::string(name), "'; known: ", known));
  }
  return factory();
}

std::vector<CatalogAlgorithm> CatalogAlgorithms() {
  std::vector<CatalogAlgorithm> out;
  Factories& f = TheFactories();
  for (const catalog::AlgorithmSpec* spec : catalog::All()) {
    std::lock_guard<std::mutex> lock(f.mu);
    auto it = f.by_name.find(spec->name);
    if (it != f.by_name.end()) out.push_back({spec, it->second});
  }
  return out;
}

std::vector<std::string> AllreduceNames() {
  std::vector<std::string> names;
  for (const CatalogAlgorithm& a : CatalogAlgorithms()) names.push_back(a.spec->name);
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

}  // namespace gradex::collectives
