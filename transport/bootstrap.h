// Bootstrap: how ranks exchange their transport addresses before the data
// plane exists. The benchmark launcher implements it with files on this
// machine; the coordinator will implement it over gRPC.
#ifndef GRADEX_TRANSPORT_BOOTSTRAP_H_
#define GRADEX_TRANSPORT_BOOTSTRAP_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "transport/transport.h"

namespace gradex::transport {

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Publishes this rank's blob and returns every rank's, indexed by rank.
  virtual absl::StatusOr<std::vector<std::string>> AllGather(const std::string& mine,
                                                             Deadline deadline) = 0;
};

}  // namespace gradex::transport

#endif  // GRADEX_TRANSPORT_BOOTSTRAP_H_
