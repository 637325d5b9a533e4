#include "services/client/timeline.h"

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace gradex::client {
namespace {

// Algorithm names are catalog names; anything else is dropped from the JSON.
std::string Safe(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c != '"' && c != '\\' && static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out;
}

}  // namespace

std::string Timeline::PathFor(const std::string& path, int rank, int world_size) {
  if (world_size <= 1) return path;
  if (absl::EndsWith(path, ".json")) {
    return absl::StrCat(path.substr(0, path.size() - 5), ".rank", rank, ".json");
  }
  return absl::StrCat(path, ".rank", rank);
}

absl::StatusOr<std::unique_ptr<Timeline>> Timeline::Open(const std::string& path, int rank) {
  std::FILE* f = std::fopen(path.c_str(), "w+");
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("GRADEX_TIMELINE: cannot write '", path, "': ", std::strerror(errno)));
  }
  std::unique_ptr<Timeline> t(new Timeline(f, rank));
  std::fputs("[", f);
  t->end_ = std::ftell(f);
  t->first_ = true;
  t->Append(absl::StrCat(R"({"name": "process_name", "ph": "M", "pid": )", rank,
                         R"(, "args": {"name": "gradex rank )", rank, R"("}})"));
  for (auto [tid, name] : {std::pair{0, "exchange"}, {1, "selection"}}) {
    t->Append(absl::StrCat(R"({"name": "thread_name", "ph": "M", "pid": )", rank, R"(, "tid": )",
                           tid, R"(, "args": {"name": ")", name, R"("}})"));
  }
  return t;
}

Timeline::~Timeline() { Close(); }

void Timeline::Append(const std::string& event) {
  if (f_ == nullptr) return;
  std::fseek(f_, end_, SEEK_SET);
  std::fputs(first_ ? "\n" : ",\n", f_);
  std::fputs(event.c_str(), f_);
  first_ = false;
  end_ = std::ftell(f_);
  std::fputs("\n]\n", f_);
}

void Timeline::Bucket(const std::vector<Span>& spans, uint64_t step, uint32_t bucket,
                      std::string_view algorithm, size_t elements) {
  if (f_ == nullptr) return;
  for (const Span& s : spans) {
    const int64_t us =
        std::chrono::duration_cast<std::chrono::microseconds>(s.start.time_since_epoch()).count();
    Append(absl::StrCat(
        R"({"name": ")", std::string(s.name), R"(", "cat": "bucket", "ph": "X", "ts": )", us,
        R"(, "dur": )", static_cast<int64_t>(s.seconds * 1e6), R"(, "pid": )", rank_,
        R"(, "tid": )", s.tid, R"(, "args": {"step": )", step, R"(, "bucket": )", bucket,
        R"(, "algorithm": ")", Safe(algorithm), R"(", "elements": )", elements, "}}"));
  }
  std::fflush(f_);
}

void Timeline::Close() {
  if (f_ == nullptr) return;
  std::fflush(f_);
  std::fclose(f_);
  f_ = nullptr;
}

}  // namespace gradex::client
