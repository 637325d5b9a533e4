#include "collectives/wire/frame_blame.h"

#include <string>
#include <utility>

namespace gradex::collectives::wire {

void FrameBlame::Blame(int peer, std::string why) {
  absl::MutexLock lock(&mu_);
  if (peer_ >= 0) return;
  peer_ = peer;
  why_ = std::move(why);
}

int FrameBlame::peer() const {
  absl::MutexLock lock(&mu_);
  return peer_;
}

std::string FrameBlame::why() const {
  absl::MutexLock lock(&mu_);
  return why_;
}

void FrameBlame::Clear() {
  absl::MutexLock lock(&mu_);
  peer_ = -1;
  why_.clear();
}

}  // namespace gradex::collectives::wire
