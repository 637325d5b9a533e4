// Which peer sent the first frame a rank refused in a call (collectives/wire/frame.h).
#ifndef GRADEX_COLLECTIVES_WIRE_FRAME_BLAME_H_
#define GRADEX_COLLECTIVES_WIRE_FRAME_BLAME_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace gradex::collectives::wire {

// The first frame a rank refused in a call and the peer that sent it: a
// receiver validates every frame and knows whom it received from, so the
// call's owner can name the culprit (the agent reports it; the coordinator
// evicts it). Thread-safe; the first blame wins.
class FrameBlame {
 public:
  void Blame(int peer, std::string why);
  // The blamed peer (-1: none) and why.
  int peer() const;
  std::string why() const;
  void Clear();

 private:
  mutable absl::Mutex mu_;
  int peer_ ABSL_GUARDED_BY(mu_) = -1;
  std::string why_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gradex::collectives::wire

#endif  // GRADEX_COLLECTIVES_WIRE_FRAME_BLAME_H_
