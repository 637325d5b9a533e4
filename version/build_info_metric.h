// gradex_build_info{version,git,cuda,ucx} = 1: which build a process runs, so
// that a dashboard can tell when a job's processes run different releases.
#ifndef GRADEX_VERSION_BUILD_INFO_METRIC_H_
#define GRADEX_VERSION_BUILD_INFO_METRIC_H_

#include "prometheus/registry.h"

namespace gradex::version {

void RegisterBuildInfo(prometheus::Registry& registry);

}  // namespace gradex::version

#endif  // GRADEX_VERSION_BUILD_INFO_METRIC_H_
