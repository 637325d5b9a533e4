#include "version/build_info_metric.h"

#include "prometheus/gauge.h"
#include "version/version.h"

namespace gradex::version {

void RegisterBuildInfo(prometheus::Registry& registry) {
  prometheus::BuildGauge()
      .Name("gradex_build_info")
      .Help("Always 1; the labels name the gradex build this process runs")
      .Register(registry)
      .Add({{"version", Version()},
            {"git", GitCommit()},
            {"cuda", BuildCudaVersion()},
            {"ucx", BuildUcxVersion()}})
      .Set(1);
}

}  // namespace gradex::version
