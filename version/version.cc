#include "version/version.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "build_config.h"

namespace gradex::version {

const char* Version() { return GRADEX_BUILD_VERSION; }
const char* BuildCudaVersion() { return GRADEX_BUILD_CUDA; }
const char* BuildUcxVersion() { return GRADEX_BUILD_UCX; }

std::string VersionLine(absl::string_view program) {
  return absl::StrCat(program, " ", Version(), " (git ", GitCommit(), ", CUDA ", BuildCudaVersion(),
                      ", UCX ", BuildUcxVersion(), ", wire protocol ", kWireProtocol, ")");
}

bool PrintVersionIfAsked(int argc, char** argv, absl::string_view program) {
  for (int i = 1; i < argc; ++i) {
    if (absl::string_view(argv[i]) == "--version") {
      std::printf("%s\n", VersionLine(program).c_str());
      return true;
    }
  }
  return false;
}

}  // namespace gradex::version
