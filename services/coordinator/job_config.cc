#include "services/coordinator/job_config.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "catalog/bucket_algorithms.h"
#include "catalog/catalog.h"
#include "google/protobuf/util/json_util.h"
#include "gradex/v1/job_config.pb.h"
#include "services/coordinator/limits.h"
#include "services/coordinator/validate.h"

namespace gradex::coordinator {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("job config: ", field, ": ", why));
}

constexpr size_t kMaxConfigBytes = 1 << 20;

}  // namespace

bool IsKnownAlgorithm(absl::string_view name) {
  return catalog::Find(std::string_view(name.data(), name.size())) != nullptr;
}

namespace {

// The algorithm's parameters: `params` by catalog name, checked against the
// entry (a refusal names the parameter), and the older top-level keys as
// aliases, checked as they always were and kept only when the algorithm has
// the parameter (other algorithms ignored them before params existed).
absl::Status ReadParams(const gradex::v1::JobConfig& c, JobSettings* s) {
  const catalog::AlgorithmSpec* spec = catalog::Find(s->algorithm);
  if (spec == nullptr) return Bad("algorithm", "not in the catalog");
  if (c.params_size() > static_cast<int>(catalog::kMaxParams)) {
    return Bad("params", absl::StrCat("at most ", catalog::kMaxParams, " entries"));
  }
  for (const auto& [name, value] : c.params()) s->params.emplace(name, value);
  // "auto" may run any algorithm of the catalog on a bucket: a parameter of
  // any of them, valid for each that reads it.
  if (absl::Status st = s->auto_algorithm ? catalog::CheckParamsInPlay(catalog::All(), s->params)
                                          : catalog::CheckParams(*spec, s->params);
      !st.ok()) {
    return Bad("params", std::string(st.message()));
  }
  struct Alias {
    const char* name;
    int value;
    bool valid;
    const char* range;
  };
  const int q = c.quantize_bits();
  const Alias aliases[] = {
      {"oktopk_tau", c.oktopk_tau(), c.oktopk_tau() >= 0 && c.oktopk_tau() <= (1 << 20),
       "0..1048576 steps (0 = default)"},
      {"oktopk_tau_prime", c.oktopk_tau_prime(),
       c.oktopk_tau_prime() >= 0 && c.oktopk_tau_prime() <= (1 << 20),
       "0..1048576 steps (0 = default)"},
      {"quantize_bits", q, q == 0 || q == 2 || q == 4 || q == 8, "0, 2, 4 or 8"},
  };
  for (const Alias& a : aliases) {
    if (!a.valid) return Bad(a.name, a.range);
    if (a.value == 0 || (!s->auto_algorithm && catalog::FindParam(*spec, a.name) == nullptr)) {
      continue;
    }
    auto [it, added] = s->params.emplace(a.name, a.value);
    if (!added && it->second != a.value) {
      return Bad(a.name, absl::StrCat(a.value, " differs from params.", a.name, " ", it->second));
    }
  }
  return absl::OkStatus();
}

// A parameter-server job: its `ps` block, bounded, and the rendezvous
// counting its servers. max_staleness may also come as the catalog parameter
// (params.max_staleness), an alias that must then agree.
absl::Status ReadPs(const gradex::v1::JobConfig& c, JobSettings* s) {
  const bool dgs = s->algorithm == catalog::ParameterServerAlgorithm();
  if (!dgs) {
    if (c.has_ps()) {
      return Bad("ps", absl::StrCat("only for algorithm '",
                                    std::string(catalog::ParameterServerAlgorithm()), "'"));
    }
    return absl::OkStatus();
  }
  const gradex::v1::PsConfig& p = c.ps();
  PsSettings& ps = s->ps;
  ps.enabled = true;
  if (p.server_shards() > 4096) return Bad("ps.server_shards", "0..4096 (0 = one per host)");
  ps.server_shards = p.server_shards();
  if (p.servers() > 4096) return Bad("ps.servers", "0..4096 (0 = 1)");
  ps.servers = p.servers() == 0 ? 1 : static_cast<int>(p.servers());
  if (p.max_staleness() > (uint64_t{1} << 32)) {
    return Bad("ps.max_staleness", "0..4294967296 versions (0 = unbounded)");
  }
  ps.max_staleness = p.max_staleness();
  if (auto it = s->params.find("max_staleness"); it != s->params.end()) {
    if (ps.max_staleness != 0 && it->second != static_cast<double>(ps.max_staleness)) {
      return Bad("ps.max_staleness", "differs from params.max_staleness");
    }
    ps.max_staleness = static_cast<uint64_t>(it->second);
  }
  if (p.has_snapshot_interval_ms()) {
    if (p.snapshot_interval_ms() > 86400000u) return Bad("ps.snapshot_interval_ms", "0..86400000");
    ps.snapshot_interval = absl::Milliseconds(p.snapshot_interval_ms());
  }
  if (s->auto_teams || s->teams > 1) return Bad("teams", "a parameter-server job has no teams");
  if (p.layer_sizes_size() < 1 || static_cast<size_t>(p.layer_sizes_size()) > kMaxPsLayers) {
    return Bad("ps.layer_sizes", "required for a parameter-server job: 1..65536 layer sizes");
  }
  uint64_t total = 0;
  for (int j = 0; j < p.layer_sizes_size(); ++j) {
    if (p.layer_sizes(j) == 0) return Bad("ps.layer_sizes", absl::StrCat("layer ", j, " is empty"));
    total += p.layer_sizes(j);
  }
  if (total >= (uint64_t{1} << 32)) return Bad("ps.layer_sizes", "total at most 2^32 - 1");
  ps.layer_sizes.assign(p.layer_sizes().begin(), p.layer_sizes().end());
  ps.workers = s->world_size;
  const int max_workers = s->max_world_size == 0 ? s->world_size : s->max_world_size;
  ps.max_workers = max_workers;
  // The servers' staleness bound holds only from workers - 1 up (a worker
  // that is most behind is never held: ps/dgs_server_shard.h).
  if (ps.max_staleness != 0 && ps.max_staleness + 1 < static_cast<uint64_t>(max_workers)) {
    return Bad("ps.max_staleness", absl::StrCat("at least the largest worker count - 1 (",
                                                max_workers - 1, "), or 0 = unbounded"));
  }
  if (max_workers + ps.servers > kMaxWorldSize) {
    return Bad("ps.servers", "workers plus servers at most 65536");
  }
  // The rendezvous and the epoch caps count members of every role.
  s->world_size += ps.servers;
  s->min_world_size += ps.servers;
  if (s->max_world_size != 0) s->max_world_size += ps.servers;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<JobSettings> ParseJobConfig(absl::string_view json) {
  if (json.size() > kMaxConfigBytes) return Bad("file", "over 1 MiB");
  gradex::v1::JobConfig c;
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = false;  // a typo must not silently become a default
  auto st = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &c, opts);
  if (!st.ok()) return Bad("JSON", std::string(st.message()));

  JobSettings s;
  if (!IsValidJobId(c.job_id())) return Bad("job_id", "required, 1..128 bytes of [A-Za-z0-9._-]");
  s.job_id = c.job_id();
  if (c.world_size() < 1 || c.world_size() > kMaxWorldSize) return Bad("world_size", "1..65536");
  s.world_size = c.world_size();
  if (c.min_world_size() < 0 || c.min_world_size() > c.world_size()) {
    return Bad("min_world_size", "0..world_size");
  }
  s.min_world_size = c.min_world_size() == 0 ? c.world_size() : c.min_world_size();
  if (c.max_world_size() != 0 &&
      (c.max_world_size() < c.world_size() || c.max_world_size() > kMaxWorldSize)) {
    return Bad("max_world_size", "0 or world_size..65536");
  }
  s.max_world_size = c.max_world_size();
  if (c.rendezvous_timeout_ms() > 0)
    s.rendezvous_timeout = absl::Milliseconds(c.rendezvous_timeout_ms());
  s.auto_algorithm = c.algorithm() == kAutoAlgorithm;
  if (!s.auto_algorithm && !IsKnownAlgorithm(c.algorithm())) {
    return Bad("algorithm", absl::StrCat("unknown name '", c.algorithm().substr(0, 64),
                                         "'; the agents run: ", catalog::NameList(), " (or ",
                                         kAutoAlgorithm, ": the coordinator chooses per bucket)"));
  }
  if (!s.auto_algorithm && catalog::TraitsOf(c.algorithm()).parameter_server &&
      c.algorithm() != catalog::ParameterServerAlgorithm()) {
    // Only DGS has a server role (ps/ps_server.h).
    return Bad("algorithm",
               absl::StrCat("'", c.algorithm(),
                            "' is a parameter-server algorithm without a server role"));
  }
  s.algorithm = s.auto_algorithm ? std::string(catalog::DefaultAlgorithm()) : c.algorithm();
  if (!(c.density() > 0 && c.density() <= 1)) return Bad("density", "required, in (0, 1]");
  s.density = c.density();
  if (c.teams() < 0 || c.teams() > c.world_size()) return Bad("teams", "0..world_size");
  s.teams = c.teams() == 0 ? 1 : c.teams();
  s.prefer_rsag = c.prefer_rsag();
  const catalog::Traits traits = catalog::TraitsOf(s.algorithm);
  if (c.auto_teams() && !traits.uses_teams) {
    return Bad("auto_teams", "only for algorithms with teams (SparDL's SAG variants)");
  }
  s.auto_teams = c.auto_teams();
  auto period = [](int v, int def, absl::string_view name, int* out) -> absl::Status {
    if (v < 0 || v > (1 << 20)) return Bad(name, "0..1048576 steps (0 = default)");
    *out = v == 0 ? def : v;
    return absl::OkStatus();
  };
  if (auto e = period(c.barrier_period(), 64, "barrier_period", &s.barrier_period); !e.ok())
    return e;
  if (auto e = period(c.covap_interval(), 3, "covap_interval", &s.covap_interval); !e.ok())
    return e;
  if (c.covap_profile_steps() < 0 || c.covap_profile_steps() > 100000) {
    return Bad("covap_profile_steps", "0..100000");
  }
  s.covap_profile_steps = c.has_covap_profile_steps() ? c.covap_profile_steps() : 16;
  if (c.lease_ms() != 0 && c.lease_ms() < 100) return Bad("lease_ms", ">= 100");
  if (c.lease_ms() > 0) s.lease = absl::Milliseconds(c.lease_ms());
  if (c.step_deadline_ms() > 0) s.step_deadline = absl::Milliseconds(c.step_deadline_ms());
  if (c.entry_timeout_ms() > 0) s.entry_timeout = absl::Milliseconds(c.entry_timeout_ms());
  // Heartbeats (every lease / 3) must be able to say a member enters.
  if (s.entry_timeout < s.lease) return Bad("entry_timeout_ms", ">= lease_ms");
  if (c.has_loss_settle_ms() && absl::Milliseconds(c.loss_settle_ms()) > s.lease) {
    return Bad("loss_settle_ms", "<= lease_ms");
  }
  s.loss_settle = c.has_loss_settle_ms() ? absl::Milliseconds(c.loss_settle_ms())
                                         : std::min(s.lease / 3, absl::Seconds(1));
  if (c.plan_lead_steps() < 0 || c.plan_lead_steps() > (1 << 20)) {
    return Bad("plan_lead_steps", "0..1048576");
  }
  s.plan_lead_steps = c.plan_lead_steps() == 0 ? s.barrier_period : c.plan_lead_steps();
  if (auto e = ReadParams(c, &s); !e.ok()) return e;
  if (auto e = ReadPs(c, &s); !e.ok()) return e;
  s.coordinate_kprime = c.has_coordinate_kprime() ? c.coordinate_kprime() : traits.uses_teams;
  s.coordinate_oktopk_regions = c.has_coordinate_oktopk_regions() ? c.coordinate_oktopk_regions()
                                                                  : traits.coordinated_regions;
  return s;
}

absl::StatusOr<JobSettings> LoadJobConfig(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("job config: cannot open '", path, "'"));
  std::ostringstream buf;
  buf << in.rdbuf();
  auto s = ParseJobConfig(buf.str());
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.status().message()));
  return s;
}

}  // namespace gradex::coordinator
