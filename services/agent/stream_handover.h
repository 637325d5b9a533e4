// The point a trainer's CUDA stream had reached when it handed a device
// bucket over: an event recorded on that stream on the trainer's thread
// (BucketPipeline::Submit), waited for by the selection thread before gradex
// reads the bucket. So a bucket written on the trainer's own stream (not the
// legacy default stream, which gradex's blocking streams follow anyway) is
// never raced, and the trainer is never blocked. Built with CUDA only
// (GRADEX_AGENT_CUDA); under DeviceStaging::UseHostCopiesForTesting there is
// no stream and nothing is recorded.
#ifndef GRADEX_SERVICES_AGENT_STREAM_HANDOVER_H_
#define GRADEX_SERVICES_AGENT_STREAM_HANDOVER_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gradex::agent {

class StreamHandover {
 public:
  // An event recorded on `stream` (a cudaStream_t, not 0) on the device of
  // `data` (the bucket's memory). Where no event can be recorded there (a
  // stream of another device), the stream is synchronized instead, on the
  // calling thread, and null is returned: the handover is complete. Leaves
  // the calling thread's current context as it was.
  static absl::StatusOr<std::unique_ptr<StreamHandover>> Record(uintptr_t stream, const void* data);
  ~StreamHandover();
  StreamHandover(const StreamHandover&) = delete;
  StreamHandover& operator=(const StreamHandover&) = delete;

  // Waits until the trainer's stream has passed the handover.
  absl::Status Wait();

 private:
  StreamHandover() = default;
  void* event_ = nullptr;  // a cudaEvent_t
  int device_ = -1;
};

}  // namespace gradex::agent

#endif  // GRADEX_SERVICES_AGENT_STREAM_HANDOVER_H_
