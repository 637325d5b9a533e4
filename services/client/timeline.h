// GRADEX_TIMELINE=FILE: a Chrome-trace JSON (chrome://tracing, Perfetto) of
// every bucket's phases on this rank, as Horovod's timeline: per bucket its
// wait in the queue, then selection, communication and reduction (each the
// call's total for that phase, laid end to end inside the call). The file is
// a complete JSON array after every bucket (the closing bracket is rewritten
// after each append), so a process that stops between buckets leaves a file
// that parses. pid = the trainer's rank, so several ranks' files merge.
#ifndef GRADEX_SERVICES_CLIENT_TIMELINE_H_
#define GRADEX_SERVICES_CLIENT_TIMELINE_H_

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace gradex::client {

class Timeline {
 public:
  // With world_size > 1 each rank writes its own file: "t.json" becomes
  // "t.rank<R>.json" ("t" becomes "t.rank<R>").
  static std::string PathFor(const std::string& path, int rank, int world_size);
  static absl::StatusOr<std::unique_ptr<Timeline>> Open(const std::string& path, int rank);
  ~Timeline();

  struct Span {
    std::string_view name;  // "queue", "selection", "communication", "reduction", "failed"
    std::chrono::system_clock::time_point start;
    double seconds = 0;
  };
  // The events of one bucket, written and flushed together.
  void Bucket(const std::vector<Span>& spans, uint64_t step, uint32_t bucket,
              std::string_view algorithm, size_t elements);
  void Close();

 private:
  explicit Timeline(std::FILE* f, int rank) : f_(f), rank_(rank) {}
  void Append(const std::string& event);

  std::FILE* f_;
  const int rank_;
  long end_ = 0;  // where the closing bracket starts
  bool first_ = true;
};

}  // namespace gradex::client

#endif  // GRADEX_SERVICES_CLIENT_TIMELINE_H_
