// GRADEX_TIMELINE=FILE: a Chrome-trace JSON (chrome://tracing, Perfetto) of
// every bucket's phases on this rank, as Horovod's timeline, on two rows (the
// client's two threads): tid 1 "selection" holds each bucket's wait in the
// queue and its selection (the call's local part: gradient into the
// residual, local top-k); tid 0 "exchange" its wait for the previous
// bucket's exchange, then the exchange, with its communication and
// reduction (the call's phase totals, laid end to end) inside. With the
// pipeline, bucket b+1's selection lies inside bucket b's exchange. The file
// is a complete JSON array after every bucket (the closing bracket is
// rewritten after each append), so a process that stops between buckets
// leaves a file that parses. pid = the trainer's rank, so several ranks'
// files merge.
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
    // "queue", "selection", "wait", "exchange", "communication", "reduction",
    // "failed"
    std::string_view name;
    std::chrono::system_clock::time_point start;
    double seconds = 0;
    int tid = 0;  // 0: the progress thread (exchanges), 1: the selection thread
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
