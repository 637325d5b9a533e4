#include "tests/transport/test_util.h"

#include <barrier>
#include <thread>

#include "absl/strings/str_cat.h"

namespace gradex::testing {

absl::StatusOr<std::vector<std::string>> InProcessExchange::AllGather(
    int rank, int round, const std::string& mine, transport::Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  auto& blobs = rounds_[round];
  if (blobs.empty()) blobs.resize(size_);
  blobs[rank] = mine;
  cv_.notify_all();
  auto all = [&] {
    for (const auto& b : blobs) {
      if (!b.has_value()) return false;
    }
    return true;
  };
  if (!cv_.wait_until(lock, deadline, all)) {
    return absl::DeadlineExceededError(
        absl::StrCat("in-process bootstrap: rank ", rank, " round ", round, " timed out"));
  }
  std::vector<std::string> out;
  for (const auto& b : blobs) out.push_back(*b);
  return out;
}

transport::Bytes Pattern(int src, int dst, int index, size_t length) {
  transport::Bytes b(length);
  uint32_t x = 0x9e3779b9u * static_cast<uint32_t>(src * 131 + dst * 7 + index + 1);
  for (size_t i = 0; i < length; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b[i] = static_cast<uint8_t>(x);
  }
  return b;
}

std::string CheckPattern(const transport::Bytes& got, int src, int dst, int index, size_t length) {
  if (got.size() != length) {
    return absl::StrCat("message ", src, "->", dst, " #", index, ": size ", got.size(), ", want ",
                        length);
  }
  if (got != Pattern(src, dst, index, length)) {
    return absl::StrCat("message ", src, "->", dst, " #", index, ": content differs");
  }
  return "";
}

std::vector<absl::Status> RunRanks(std::vector<std::unique_ptr<transport::Transport>>& ranks,
                                   const RankBody& body) {
  std::vector<absl::Status> out(ranks.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < ranks.size(); ++r) {
    threads.emplace_back([&, r] { out[r] = body(*ranks[r]); });
  }
  for (auto& t : threads) t.join();
  return out;
}

std::vector<absl::Status> RunWorld(int size, const RankFactory& factory, const RankBody& body) {
  auto exchange = std::make_shared<InProcessExchange>(size);
  std::vector<absl::Status> out(size);
  std::barrier before_destroy(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<transport::Transport>> t = factory(r, size, exchange);
      if (!t.ok()) {
        out[r] = t.status();
        before_destroy.arrive_and_wait();
        return;
      }
      out[r] = body(**t);
      before_destroy.arrive_and_wait();
      t->reset();
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace gradex::testing
