// Test helpers: an in-process Bootstrap and a runner that gives every rank of
// a world its own thread, so one test can drive loopback or UCX ranks alike.
#ifndef GRADEX_TESTS_TRANSPORT_TEST_UTIL_H_
#define GRADEX_TESTS_TRANSPORT_TEST_UTIL_H_

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/bootstrap.h"
#include "transport/transport.h"

namespace gradex::testing {

// State shared by the ranks of one in-process world. AllGather may be called
// several times; calls are matched by their sequence number on each rank.
class InProcessExchange {
 public:
  explicit InProcessExchange(int size) : size_(size) {}
  int size() const { return size_; }

  absl::StatusOr<std::vector<std::string>> AllGather(int rank, int round, const std::string& mine,
                                                     transport::Deadline deadline);

 private:
  const int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, std::vector<std::optional<std::string>>> rounds_;
};

class InProcessBootstrap : public transport::Bootstrap {
 public:
  InProcessBootstrap(std::shared_ptr<InProcessExchange> exchange, int rank)
      : exchange_(std::move(exchange)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return exchange_->size(); }
  absl::StatusOr<std::vector<std::string>> AllGather(const std::string& mine,
                                                     transport::Deadline deadline) override {
    return exchange_->AllGather(rank_, round_++, mine, deadline);
  }

 private:
  std::shared_ptr<InProcessExchange> exchange_;
  const int rank_;
  int round_ = 0;
};

// Byte pattern that identifies (src, dst, index) so misrouted data shows.
transport::Bytes Pattern(int src, int dst, int index, size_t length);
// Returns an empty string when `got` equals Pattern(...), else a description.
std::string CheckPattern(const transport::Bytes& got, int src, int dst, int index, size_t length);

// Runs `body` once per rank, each in its own thread, and returns each rank's status.
using RankBody = std::function<absl::Status(transport::Transport&)>;
std::vector<absl::Status> RunRanks(std::vector<std::unique_ptr<transport::Transport>>& ranks,
                                   const RankBody& body);

// Creates the transport of one rank from its thread (UCX builds its context
// and worker there). Must return within the connect deadline.
using RankFactory = std::function<absl::StatusOr<std::unique_ptr<transport::Transport>>(
    int rank, int size, std::shared_ptr<InProcessExchange> exchange)>;

// Builds a world of `size` ranks with `factory`, each rank in its own thread;
// runs `body` there; waits for all ranks before any is destroyed (so that no
// rank tears down endpoints a peer still uses), then destroys them in parallel.
// A creation failure is reported as that rank's status.
std::vector<absl::Status> RunWorld(int size, const RankFactory& factory, const RankBody& body);

}  // namespace gradex::testing

#endif  // GRADEX_TESTS_TRANSPORT_TEST_UTIL_H_
