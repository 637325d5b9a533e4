#include "catalog/catalog.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "catalog/builtin.h"

namespace gradex::catalog {
namespace {

struct Store {
  std::mutex mu;
  // unique_ptr: Find's pointers survive later registrations.
  std::vector<std::unique_ptr<AlgorithmSpec>> specs;  // by id
};

absl::Status AddLocked(Store& s, AlgorithmSpec spec) {
  if (spec.id == 0) return absl::InvalidArgumentError("catalog: algorithm id 0 is reserved");
  if (spec.name.empty()) return absl::InvalidArgumentError("catalog: empty algorithm name");
  for (const auto& e : s.specs) {
    if (e->id == spec.id || e->name == spec.name) {
      return absl::AlreadyExistsError(absl::StrCat("catalog: '", spec.name, "' (id ", spec.id,
                                                   ") clashes with '", e->name, "' (id ", e->id,
                                                   ")"));
    }
  }
  auto it = std::lower_bound(s.specs.begin(), s.specs.end(), spec.id,
                             [](const auto& e, uint16_t id) { return e->id < id; });
  s.specs.insert(it, std::make_unique<AlgorithmSpec>(std::move(spec)));
  return absl::OkStatus();
}

// Built in on first use, so that a static registrar in another translation
// unit finds them present whatever the initialisation order.
Store& TheStore() {
  static Store* s = [] {
    auto* store = new Store;
    for (AlgorithmSpec& spec : BuiltinAlgorithms()) {
      absl::Status st = AddLocked(*store, std::move(spec));
      if (!st.ok()) std::abort();  // two built-in entries clash: a programming error
    }
    return store;
  }();
  return *s;
}

}  // namespace

absl::Status Register(AlgorithmSpec spec) {
  Store& s = TheStore();
  std::lock_guard<std::mutex> lock(s.mu);
  return AddLocked(s, std::move(spec));
}

bool internal::RegisterOrDie(AlgorithmSpec spec) {
  absl::Status st = Register(std::move(spec));
  if (!st.ok()) {
    std::fprintf(stderr, "gradex: %s\n", std::string(st.message()).c_str());
    std::abort();
  }
  return true;
}

const AlgorithmSpec* Find(std::string_view name) {
  Store& s = TheStore();
  std::lock_guard<std::mutex> lock(s.mu);
  for (const auto& e : s.specs) {
    if (e->name == name) return e.get();
  }
  return nullptr;
}

const AlgorithmSpec* FindId(uint16_t id) {
  Store& s = TheStore();
  std::lock_guard<std::mutex> lock(s.mu);
  for (const auto& e : s.specs) {
    if (e->id == id) return e.get();
  }
  return nullptr;
}

std::vector<const AlgorithmSpec*> All() {
  Store& s = TheStore();
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<const AlgorithmSpec*> out;
  for (const auto& e : s.specs) out.push_back(e.get());
  return out;
}

Traits TraitsOf(std::string_view name) {
  const AlgorithmSpec* spec = Find(name);
  return spec == nullptr ? Traits{} : spec->traits;
}

std::string TeamAlgorithmFor(bool power_of_two) {
  const AlgorithmSpec* any = nullptr;
  for (const AlgorithmSpec* spec : All()) {
    if (!spec->traits.uses_teams) continue;
    if (spec->traits.teams_power_of_two) {
      if (power_of_two) return spec->name;
    } else if (any == nullptr) {
      any = spec;
    }
  }
  return any == nullptr ? std::string() : any->name;
}

std::vector<std::string> Names() {
  std::vector<std::string> out;
  for (const AlgorithmSpec* e : All()) out.push_back(e->name);
  return out;
}

std::string NameList() { return absl::StrJoin(Names(), ", "); }

const ParamSpec* FindParam(const AlgorithmSpec& spec, std::string_view name) {
  for (const ParamSpec& p : spec.params) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

absl::Status CheckParam(const ParamSpec& param, double value) {
  if (!std::isfinite(value) || (param.type == ParamType::kInt && value != std::floor(value))) {
    return absl::InvalidArgumentError(
        absl::StrCat(param.name, ": ", value, " is not ",
                     param.type == ParamType::kInt ? "an integer" : "a finite number"));
  }
  if (!param.allowed.empty()) {
    if (std::find(param.allowed.begin(), param.allowed.end(), value) == param.allowed.end()) {
      return absl::InvalidArgumentError(absl::StrCat(param.name, ": ", value, " not one of ",
                                                     absl::StrJoin(param.allowed, ", ")));
    }
    return absl::OkStatus();
  }
  if (value < param.min || value > param.max) {
    return absl::InvalidArgumentError(
        absl::StrCat(param.name, ": ", value, " not in [", param.min, ", ", param.max, "]"));
  }
  return absl::OkStatus();
}

absl::Status CheckParams(const AlgorithmSpec& spec, const ParamValues& values) {
  if (values.size() > kMaxParams) {
    return absl::InvalidArgumentError(
        absl::StrCat(values.size(), " parameters (at most ", kMaxParams, ")"));
  }
  for (const auto& [name, value] : values) {
    const ParamSpec* param = FindParam(spec, name);
    if (param == nullptr) {
      std::vector<std::string> known;
      for (const ParamSpec& p : spec.params) known.push_back(p.name);
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter '", name.substr(0, kMaxParamNameBytes), "' is not one of ", spec.name, "'s (",
          known.empty() ? "it has none" : absl::StrJoin(known, ", "), ")"));
    }
    absl::Status st = CheckParam(*param, value);
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

double ParamOr(const AlgorithmSpec* spec, const ParamValues& values, std::string_view name) {
  auto it = values.find(name);
  if (it != values.end()) return it->second;
  const ParamSpec* param = spec == nullptr ? nullptr : FindParam(*spec, name);
  return param == nullptr ? 0 : param->default_value;
}

}  // namespace gradex::catalog
