#include "version/version.h"

#include "absl/strings/str_cat.h"
#include "build_config.h"

namespace gradex {

const char* Version() { return GRADEX_BUILD_VERSION; }
const char* CudaVersion() { return GRADEX_BUILD_CUDA; }
const char* UcxVersion() { return GRADEX_BUILD_UCX; }

std::string VersionLine(absl::string_view program) {
  return absl::StrCat(program, " ", Version(), " (git ", GitCommit(), ", CUDA ", CudaVersion(),
                      ", UCX ", UcxVersion(), ", wire protocol ", kWireProtocol, ")");
}

}  // namespace gradex
