// PsWorker's options check and the job an embedding rank 0 starts its
// coordinator with (ps_worker_config.h).
#include "ps/ps_worker_config.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "catalog/catalog.h"
#include "ps/dgs_layout.h"
#include "ps/ps_option_table.h"
#include "services/client/embedded_coordinator.h"
#include "services/client/option_table.h"

namespace gradex::ps {

absl::Status CheckPsWorkerOptions(const PsWorkerOptions& o) {
  auto bad = [](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("gradex PsWorker options: ", what));
  };
  const client::ClientOptions& c = o.client;
  if (c.world_size < 1 || c.world_size > 65535) return bad("world_size must be in 1..65535");
  if (c.rank < 0 || c.rank >= c.world_size) {
    return bad(absl::StrCat("rank ", c.rank, " is not in 0..", c.world_size - 1));
  }
  if (c.timeout.count() < 1 || c.timeout > std::chrono::hours(24)) {
    return bad("timeout must be in 1 ms..24 h");
  }
  if (absl::Status s = client::CheckMetricsPort(c); !s.ok()) return bad(std::string(s.message()));
  // The worker's own options within their ranges (ps_option_table.cc).
  if (absl::Status s = CheckPsOptionValues(o); !s.ok()) return bad(std::string(s.message()));
  if (o.max_staleness != 0 && o.max_staleness + 1 < static_cast<uint64_t>(c.world_size)) {
    return bad(absl::StrCat("max_staleness must be 0 (unbounded) or at least world_size - 1 (",
                            c.world_size - 1, ")"));
  }
  if (o.layer_sizes.size() > 65536) return bad("at most 65536 layers");
  if (absl::StatusOr<DgsLayout> l = DgsLayout::Create(o.layer_sizes); !l.ok()) {
    return bad(std::string(l.status().message()));
  }
  return absl::OkStatus();
}

// The embedded coordinator's job (coordinator/job_config.h's format).
std::string PsJobJson(const PsWorkerOptions& o) {
  gradex::v1::JobConfig c;
  c.set_job_id(o.client.job);
  c.set_world_size(o.client.world_size);
  c.set_algorithm(std::string(catalog::ParameterServerAlgorithm()));
  c.set_density(o.density);
  c.set_step_deadline_ms(static_cast<uint32_t>(o.client.timeout.count()));
  c.set_rendezvous_timeout_ms(static_cast<uint32_t>(o.client.timeout.count()));
  gradex::v1::PsConfig* ps = c.mutable_ps();
  ps->set_servers(1);
  ps->set_server_shards(o.server_shards);
  ps->set_max_staleness(o.max_staleness);
  ps->set_snapshot_interval_ms(static_cast<uint32_t>(o.snapshot_interval.count()));
  for (auto n : o.layer_sizes) ps->add_layer_sizes(n);
  return client::JobConfigJson(c);
}

}  // namespace gradex::ps
