// libFuzzer target for the coordinator's job-config parser (ParseJobConfig).
// An accepted config must satisfy what the coordinator relies on; a broken
// promise aborts.
#include <cstdint>
#include <cstdlib>

#include "absl/strings/string_view.h"
#include "catalog/catalog.h"
#include "services/coordinator/job_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto s = gradex::coordinator::ParseJobConfig(
      absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!s.ok()) return 0;
  const auto& j = *s;
  if (j.job_id.empty() || j.job_id.size() > 128) std::abort();
  if (j.world_size < 1 || j.min_world_size < 1 || j.min_world_size > j.world_size) std::abort();
  if (!gradex::coordinator::IsKnownAlgorithm(j.algorithm)) std::abort();
  if (!(j.density > 0 && j.density <= 1)) std::abort();
  if (j.teams < 1 || j.teams > j.world_size) std::abort();
  if (j.barrier_period < 1) std::abort();
  // Every parameter kept is one of the algorithm's, with a valid value.
  if (!gradex::catalog::CheckParams(*gradex::catalog::Find(j.algorithm), j.params).ok()) {
    std::abort();
  }
  if (j.covap_interval < 1 || j.plan_lead_steps < 1) std::abort();
  if (j.lease < absl::Milliseconds(100)) std::abort();
  return 0;
}
