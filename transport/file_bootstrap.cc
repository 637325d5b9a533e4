#include "transport/file_bootstrap.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gradex::transport {

std::string FileBootstrap::PathFor(int rank) const {
  if (round_ == 0) return absl::StrCat(dir_, "/rank-", rank, ".addr");
  return absl::StrCat(dir_, "/rank-", rank, ".", round_, ".addr");
}

namespace {

absl::Status WriteAll(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat("write ", path, ": ", std::strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> FileBootstrap::AllGather(const std::string& mine,
                                                                  Deadline deadline) {
  if (rank_ < 0 || rank_ >= size_) {
    return absl::InvalidArgumentError(absl::StrCat("file bootstrap: rank ", rank_, " of ", size_));
  }
  // Readers only ever see complete files: write a temporary, then rename.
  const std::string path = PathFor(rank_);
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("file bootstrap: create ", tmp, ": ", std::strerror(errno)));
  }
  absl::Status s = WriteAll(fd, mine, tmp);
  if (s.ok() && ::fsync(fd) != 0) {
    s = absl::InternalError(absl::StrCat("fsync ", tmp, ": ", std::strerror(errno)));
  }
  ::close(fd);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = absl::InternalError(absl::StrCat("rename ", tmp, ": ", std::strerror(errno)));
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }

  std::vector<std::string> out(size_);
  std::vector<bool> have(size_, false);
  out[rank_] = mine;
  have[rank_] = true;
  auto sleep = std::chrono::milliseconds(1);
  for (;;) {
    bool all = true;
    for (int r = 0; r < size_; ++r) {
      if (have[r]) continue;
      std::ifstream in(PathFor(r), std::ios::binary);
      if (!in) {
        all = false;
        continue;
      }
      std::ostringstream buf;
      buf << in.rdbuf();
      out[r] = buf.str();
      have[r] = true;
    }
    if (all) break;
    if (Clock::now() >= deadline) {
      std::vector<int> missing;
      for (int r = 0; r < size_; ++r) {
        if (!have[r]) missing.push_back(r);
      }
      return absl::DeadlineExceededError(absl::StrCat("file bootstrap in ", dir_, ": rank ", rank_,
                                                      " timed out waiting for rank(s) ",
                                                      absl::StrJoin(missing, ",")));
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(sleep, deadline - Clock::now()));
    sleep = std::min(sleep * 2, std::chrono::milliseconds(20));
  }
  ++round_;
  return out;
}

}  // namespace gradex::transport
