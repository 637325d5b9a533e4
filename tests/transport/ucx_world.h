// A world of UCX ranks as threads of one test (test_util.h's RunWorld), each
// rank's transport created from its own thread with the same options.
#ifndef GRADEX_TESTS_TRANSPORT_UCX_WORLD_H_
#define GRADEX_TESTS_TRANSPORT_UCX_WORLD_H_

#include <memory>
#include <vector>

#include "tests/transport/test_util.h"
#include "transport/ucx/ucx_transport.h"

namespace gradex::testing {

inline std::vector<absl::Status> RunUcxWorld(int size, const transport::ucx::UcxOptions& options,
                                             const RankBody& body) {
  return RunWorld(
      size,
      [&options](int r, int, std::shared_ptr<InProcessExchange> ex)
          -> absl::StatusOr<std::unique_ptr<transport::Transport>> {
        InProcessBootstrap boot(ex, r);
        return transport::ucx::CreateUcxTransport(boot, options);
      },
      body);
}

}  // namespace gradex::testing

#endif  // GRADEX_TESTS_TRANSPORT_UCX_WORLD_H_
