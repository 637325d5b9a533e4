// What PsWorker checks of its options before it starts, and the job config
// (coordinator/job_config.h's JSON) that rank 0 embeds the coordinator with
// when no coordinator is given.
#ifndef GRADEX_PS_PS_WORKER_CONFIG_H_
#define GRADEX_PS_PS_WORKER_CONFIG_H_

#include <string>

#include "absl/status/status.h"
#include "ps/ps_worker.h"

namespace gradex::ps {

// INVALID_ARGUMENT naming the option that is out of bounds.
absl::Status CheckPsWorkerOptions(const PsWorkerOptions& o);

// The embedded coordinator's job: this worker's world, density, timeouts
// and `ps` block.
std::string PsJobJson(const PsWorkerOptions& o);

}  // namespace gradex::ps

#endif  // GRADEX_PS_PS_WORKER_CONFIG_H_
