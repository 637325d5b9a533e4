#include "transport/ucx/ucx_transport.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "transport/ucx/internal.h"

namespace gradex::transport::ucx {
namespace {

using internal::kMaxRanks;
using internal::UcxTransport;
using internal::UcxWorkerImpl;

absl::StatusOr<std::unique_ptr<Transport>> Connect(std::shared_ptr<UcxWorker> worker, int rank,
                                                   const std::vector<std::string>& addresses,
                                                   uint32_t generation, const UcxOptions& options,
                                                   Deadline deadline) {
  const int size = static_cast<int>(addresses.size());
  if (size <= 0 || size > kMaxRanks || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("UCX transport: rank ", rank, " of ", size,
                                                   " (at most ", kMaxRanks, " ranks)"));
  }
  auto impl = std::dynamic_pointer_cast<UcxWorkerImpl>(worker);
  if (impl == nullptr) return absl::InvalidArgumentError("UCX transport: not a UCX worker");
  if (impl->in_use) {
    return absl::FailedPreconditionError(
        "UCX transport: the worker still carries another communicator");
  }
  impl->in_use = true;
  auto t = std::make_unique<UcxTransport>(std::move(impl), rank, size, generation, options);
  if (absl::Status s = t->Connect(addresses, deadline); !s.ok()) return s;
  return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace

std::string UcxVersion() {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  return absl::StrCat(major, ".", minor);
}

absl::StatusOr<std::unique_ptr<Transport>> ConnectUcxTransport(
    std::shared_ptr<UcxWorker> worker, int rank, const std::vector<std::string>& addresses,
    uint32_t generation, const UcxOptions& options) {
  return Connect(std::move(worker), rank, addresses, generation, options,
                 DeadlineIn(options.connect_timeout));
}

absl::StatusOr<std::unique_ptr<Transport>> CreateUcxTransport(Bootstrap& bootstrap,
                                                              const UcxOptions& options) {
  const int rank = bootstrap.rank(), size = bootstrap.size();
  if (size <= 0 || size > kMaxRanks || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("UCX transport: rank ", rank, " of ", size,
                                                   " (at most ", kMaxRanks, " ranks)"));
  }
  const Deadline deadline = DeadlineIn(options.connect_timeout);
  absl::StatusOr<std::shared_ptr<UcxWorker>> worker = CreateUcxWorker(options);
  if (!worker.ok()) return worker.status();
  absl::StatusOr<std::vector<std::string>> all =
      bootstrap.AllGather((*worker)->address(), deadline);
  if (!all.ok()) return all.status();
  if (static_cast<int>(all->size()) != size) {
    return absl::InternalError(absl::StrCat("rank ", rank, ": bootstrap returned ", all->size(),
                                            " addresses for ", size, " ranks"));
  }
  return Connect(*std::move(worker), rank, *all, /*generation=*/0, options, deadline);
}

}  // namespace gradex::transport::ucx
