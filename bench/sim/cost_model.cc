#include "bench/sim/cost_model.h"

#include "absl/strings/str_cat.h"

namespace gradex::sim {

std::vector<std::string> Table1Names() {
  std::vector<std::string> names;
  for (const catalog::AlgorithmSpec* spec : catalog::All()) {
    if (spec->table1_cost != nullptr) names.push_back(spec->name);
  }
  return names;
}

absl::StatusOr<CostRange> Table1Cost(const std::string& algo, int p, uint64_t n, double density,
                                     int teams) {
  const catalog::AlgorithmSpec* spec = catalog::Find(algo);
  if (spec == nullptr || spec->table1_cost == nullptr) {
    return absl::NotFoundError(absl::StrCat("no Table 1 row for '", algo, "'"));
  }
  return spec->table1_cost({.world = p, .elements = n, .density = density, .teams = teams});
}

}  // namespace gradex::sim
