// Bootstrap through files in a directory shared by the ranks of one run (the
// launcher creates a fresh one per run with mkdtemp). Each rank publishes
// dir/rank-R.addr atomically and polls for everyone else's.
#ifndef GRADEX_TRANSPORT_FILE_BOOTSTRAP_H_
#define GRADEX_TRANSPORT_FILE_BOOTSTRAP_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "transport/bootstrap.h"

namespace gradex::transport {

class FileBootstrap : public Bootstrap {
 public:
  FileBootstrap(std::string dir, int rank, int size)
      : dir_(std::move(dir)), rank_(rank), size_(size) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // The first call uses rank-R.addr; later calls (rounds) use rank-R.N.addr
  // so that rounds never read each other's files.
  absl::StatusOr<std::vector<std::string>> AllGather(const std::string& mine,
                                                     Deadline deadline) override;

 private:
  std::string PathFor(int rank) const;

  const std::string dir_;
  const int rank_;
  const int size_;
  int round_ = 0;
};

}  // namespace gradex::transport

#endif  // GRADEX_TRANSPORT_FILE_BOOTSTRAP_H_
