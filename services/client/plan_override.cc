#include "services/client/plan_override.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "prometheus/counter.h"
#include "services/client/option_table.h"

namespace gradex::client {
namespace {

std::string Where(const ClientOptions& o, absl::string_view option) {
  auto it = o.given.find(std::string(option));
  return it != o.given.end() ? it->second : "C++ field";
}

// The plan's value of a parameter: the job config's, else the catalog
// default of the plan's algorithm, else (auto) of any algorithm that has
// it; none when the plan's algorithm lacks it.
struct PlanParamValue {
  std::optional<double> value;
  std::string text;
};
PlanParamValue PlanParam(const member::JobPlanConfig& plan, const std::string& name) {
  if (auto it = plan.params.find(name); it != plan.params.end()) {
    return {it->second, FormatNumber(it->second)};
  }
  const catalog::AlgorithmSpec* own = catalog::Find(plan.algorithm);
  const catalog::ParamSpec* p = own != nullptr ? catalog::FindParam(*own, name) : nullptr;
  for (const catalog::AlgorithmSpec* spec : catalog::All()) {
    if (p != nullptr || own != nullptr) break;  // auto: any algorithm may run
    p = catalog::FindParam(*spec, name);
  }
  if (p == nullptr)
    return {std::nullopt, absl::StrCat("none (", plan.algorithm, " has no such parameter)")};
  return {p->default_value,
          absl::StrCat(FormatNumber(p->default_value),
                       " (the catalog's default; the job config does not set it)")};
}

}  // namespace

std::vector<PlanOverride> FindPlanOverrides(const ClientOptions& o,
                                            const member::JobPlanConfig& plan) {
  std::vector<PlanOverride> out;
  for (const OptionSpec& spec : OptionTable()) {
    if (!spec.plan_decided || !Asked(o, spec)) continue;
    const std::string asked = FormatValue(spec, spec.get(o));
    if (spec.name == "algorithm") {
      if (o.algorithm != plan.algorithm) {
        out.push_back({"algorithm", asked, Where(o, "algorithm"), plan.algorithm});
      }
    } else if (spec.name == "density") {
      if (o.density != plan.density) {
        out.push_back({"density", asked, Where(o, "density"), FormatNumber(plan.density)});
      }
    } else if (spec.name == "teams") {
      if (o.teams == 0) continue;  // the coordinator's choice: whatever the plan has
      if (plan.auto_teams) {
        out.push_back({"teams", asked, Where(o, "teams"),
                       "chosen by the coordinator from the measured links (auto_teams)"});
      } else if (o.teams != plan.teams) {
        out.push_back({"teams", asked, Where(o, "teams"), absl::StrCat(plan.teams)});
      }
    } else if (spec.name == "params") {
      for (const auto& [name, value] : o.params) {
        const PlanParamValue theirs = PlanParam(plan, name);
        if (theirs.value != value) {
          out.push_back({absl::StrCat("params.", name), FormatNumber(value), Where(o, "params"),
                         theirs.text});
        }
      }
    }
  }
  return out;
}

std::string PlanSource(const ClientOptions& o, const std::string& address) {
  if (!o.coordinator.empty()) {
    auto it = o.given.find("coordinator");
    const std::string how = it != o.given.end() ? it->second : "coordinator option";
    return absl::StrCat("the job config of the coordinator at ", address, " (", how, ")");
  }
  if (o.rank != 0) return "rank 0's options (its embedded coordinator's job)";
  return "this rank's options (its embedded coordinator's job)";
}

std::string PlanOverrideWarning(const PlanOverride& p, const std::string& source) {
  return absl::StrCat("gradex: warning: ", p.option, ": this rank asks ", p.asked, " (", p.where,
                      ") but runs the plan's ", p.plan, ", from ", source,
                      " (allow_plan_override)");
}

absl::Status PlanOverrideError(const std::vector<PlanOverride>& overrides,
                               const std::string& source) {
  std::vector<std::string> parts;
  for (const PlanOverride& p : overrides) {
    parts.push_back(absl::StrCat(p.option, ": this rank asks ", p.asked, " (", p.where,
                                 "), the plan has ", p.plan));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "gradex: this rank's options differ from the plan it joins, from ", source, ": ",
      absl::StrJoin(parts, "; "),
      ". Fix: give every rank the plan's values (or leave them out), change the plan's source, "
      "or pass allow_plan_override=True (C key allow_plan_override=1, "
      "GRADEX_ALLOW_PLAN_OVERRIDE=1) to run the plan's values with a warning"));
}

absl::Status CheckPlanOverrides(const ClientOptions& o,
                                const std::optional<member::JobPlanConfig>& plan,
                                const std::string& address, prometheus::Registry& registry) {
  if (!plan.has_value()) return absl::OkStatus();
  const std::vector<PlanOverride> overrides = FindPlanOverrides(o, *plan);
  if (overrides.empty()) return absl::OkStatus();
  const std::string source = PlanSource(o, address);
  if (!o.allow_plan_override) return PlanOverrideError(overrides, source);
  auto& family = prometheus::BuildCounter()
                     .Name("gradex_client_plan_overrides_total")
                     .Help(
                         "Options this rank asked for that the job's plan overrides "
                         "(allow_plan_override), by option")
                     .Register(registry);
  for (const PlanOverride& p : overrides) {
    std::fprintf(stderr, "%s\n", PlanOverrideWarning(p, source).c_str());
    family.Add({{"option", p.option}}).Increment();
  }
  return absl::OkStatus();
}

}  // namespace gradex::client
