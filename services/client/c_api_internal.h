// What the C ABI's files share (c_api.cc: the client; c_api_ps.cc: the
// parameter-server worker): the per-thread error and the trainer's
// rendezvous from C (options by key: option_table.h's SetFromCKey).
#ifndef GRADEX_SERVICES_CLIENT_C_API_INTERNAL_H_
#define GRADEX_SERVICES_CLIENT_C_API_INTERNAL_H_

#include <string>

#include "absl/status/status.h"
#include "services/client/client.h"
#include "services/client/gradex.h"

namespace gradex::client {

extern thread_local std::string t_error;
// Records s for gradex_last_error and returns its code.
int Fail(const absl::Status& s);
// GRADEX_OK (clearing the error) or Fail(s).
int Report(const absl::Status& s);
Rendezvous FromC(const gradex_rendezvous* r);

}  // namespace gradex::client

#endif  // GRADEX_SERVICES_CLIENT_C_API_INTERNAL_H_
