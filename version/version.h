// What this build of gradex is: its release (the top-level VERSION file), the
// wire protocol it speaks, and what it was built from. Every binary's
// --version, gradex.__version__ and the gradex_build_info metric read these.
#ifndef GRADEX_VERSION_VERSION_H_
#define GRADEX_VERSION_VERSION_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace gradex::version {

// The control- and data-plane protocol. Raised only when a member of one
// protocol can no longer work with a coordinator or peer of another; the
// coordinator refuses a member outside [kOldestWireProtocol, kWireProtocol].
// A member that sends none (0) predates the field and speaks protocol 1.
// 2: refuse_nonfinite agreed at entry. 3: the SparDL family's balanced
// blocks (a member on equal blocks fails every call after a re-balancing).
// 4: the hierarchical exchange (its rule agreed at entry; node stages).
// 5: a sparse frame may carry -0, a sum that cancelled, which SparDL's
// residuals sent home count as delivered (a member dropping it would keep
// other residuals than its peers). 6: warm-up steps with dense probes on
// also time the bucket's sparse exchange (a shadow call a member of 5 would
// not answer).
inline constexpr uint32_t kWireProtocol = 6;
inline constexpr uint32_t kOldestWireProtocol = 6;

const char* Version();           // "0.1.0", from VERSION
const char* GitCommit();         // the commit built, e.g. "da765b0a1b2c"; "unknown" outside git
const char* BuildCudaVersion();  // the CUDA toolkit the kernels were built with, or "none"
const char* BuildUcxVersion();   // the UCX the build was configured with, e.g. "1.13.1"

// "<program> 0.1.0 (git da765b0a1b2c, CUDA 13.0.48, UCX 1.13.1, wire protocol 1)".
std::string VersionLine(absl::string_view program);

// When an argument is exactly --version: prints VersionLine(program) to
// stdout and returns true (main then exits 0 before parsing anything else).
bool PrintVersionIfAsked(int argc, char** argv, absl::string_view program);

}  // namespace gradex::version

#endif  // GRADEX_VERSION_VERSION_H_
