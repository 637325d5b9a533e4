// The job configuration (--job-config): gradex.v1.JobConfig read from JSON by
// protobuf's strict JSON parser, checked, and defaults filled in.
#ifndef GRADEX_SERVICES_COORDINATOR_JOB_CONFIG_H_
#define GRADEX_SERVICES_COORDINATOR_JOB_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "catalog/catalog.h"

namespace gradex::coordinator {

// A parameter-server job (algorithm "dgs"; JobConfig.ps).
struct PsSettings {
  bool enabled = false;
  int workers = 0;                                       // the config's world_size
  int servers = 1;                                       // SERVER members the rendezvous waits for
  uint32_t server_shards = 0;                            // 0: one per host of the first epoch
  uint64_t max_staleness = 0;                            // 0: unbounded
  absl::Duration snapshot_interval = absl::Seconds(30);  // zero: never
  std::vector<uint32_t> layer_sizes;                     // the model, in order
  // Worker slots (ids at the servers): the largest worker count of an epoch.
  int max_workers = 0;
};
inline constexpr size_t kMaxPsLayers = 65536;

// The algorithm of a parameter-server job.

struct JobSettings {
  std::string job_id;
  // Members of every role the rendezvous waits for: in a parameter-server
  // job the workers plus ps.servers.
  int world_size = 1;
  int min_world_size = 1;
  // The most members an epoch may have (late joiners grow it up to this);
  // 0: world_size. Read through MaxWorld().
  int max_world_size = 0;
  absl::Duration rendezvous_timeout = absl::Seconds(30);
  // The plan's algorithm; for a job config's "auto", the catalog default,
  // with auto_algorithm set (the bucket controller then chooses per bucket).
  std::string algorithm;
  bool auto_algorithm = false;
  double density = 0.01;
  int teams = 1;
  bool prefer_rsag = false;
  // The coordinator chooses T (and R-SAG/B-SAG) from the measured links.
  bool auto_teams = false;
  int barrier_period = 64;
  int covap_interval = 3;
  int covap_profile_steps = 16;
  absl::Duration lease = absl::Seconds(10);
  absl::Duration step_deadline = absl::Seconds(30);
  int plan_lead_steps = 64;
  // An epoch's members must show they enter it (heartbeats naming it, or a
  // report from it) within this of its start, or are evicted (a member that
  // never enters holds every peer at its entry); also the agents' bound on
  // entering (Plan.entry_timeout_ms).
  absl::Duration entry_timeout = absl::Seconds(30);
  // After a loss the next epoch waits this long, and then also drops members
  // already silent for two heartbeat intervals, so failures close together
  // make one epoch change. Zero: at once (the unit tests'
  // default; job configs default to min(lease / 3, 1 s)).
  absl::Duration loss_settle = absl::ZeroDuration();
  // The algorithm's parameters by catalog name, each checked against its
  // catalog entry; absent ones take the entry's default where read. Carried
  // by the plan and agreed by the agents at barriers.
  catalog::ParamValues params;
  bool coordinate_kprime = false;
  bool coordinate_oktopk_regions = false;
  // Parameter-only plan changes (k') are published at most this often, so a
  // large job's streams are not flooded with a plan per step.
  absl::Duration min_publish_interval = absl::Milliseconds(200);
  PsSettings ps;
};

// Parses and checks a JSON JobConfig. Errors are INVALID_ARGUMENT naming the
// field (or the JSON parser's position).
absl::StatusOr<JobSettings> ParseJobConfig(absl::string_view json);
// Reads FILE and parses it; NOT_FOUND / INVALID_ARGUMENT name the file.
absl::StatusOr<JobSettings> LoadJobConfig(const std::string& path);

// The job config's algorithm that lets the coordinator choose per bucket.
inline constexpr char kAutoAlgorithm[] = "auto";

// An algorithm of the catalog (catalog/catalog.h): the ones the agents run.
bool IsKnownAlgorithm(absl::string_view name);

// Members the coordinator holds at most: max_world_size plus a spare for
// replacements that join before the member they replace is evicted.
inline int MaxWorld(const JobSettings& s) {
  return s.max_world_size > s.world_size ? s.max_world_size : s.world_size;
}
inline int MemberCap(const JobSettings& s) {
  const int w = MaxWorld(s);
  return w + (w / 4 > 2 ? w / 4 : 2);
}

}  // namespace gradex::coordinator

#endif  // GRADEX_SERVICES_COORDINATOR_JOB_CONFIG_H_
