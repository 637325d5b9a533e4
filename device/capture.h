// CUDA graph capture of the trainer's stream is refused, naming the fix.
// gradex's device work cannot be part of a graph: its queue would wait for an
// event recorded on the capturing stream (joining that capture), the host then
// waits for the selection's counts (a synchronisation the capture forbids,
// invalidating the trainer's graph), and the exchange with other ranks happens
// on the host between the two. So the trainer's stream is asked before gradex
// records anything on it. Built with CUDA only (GRADEX_DEVICE_CUDA).
#ifndef GRADEX_DEVICE_CAPTURE_H_
#define GRADEX_DEVICE_CAPTURE_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace gradex::device {

// cudaStreamIsCapturing's shape (tests pass a stand-in).
using StreamIsCapturing = cudaError_t (*)(cudaStream_t, cudaStreamCaptureStatus*);

// OK where the trainer's `stream` (cudaStreamLegacy for its default stream)
// is not capturing a CUDA graph; FAILED_PRECONDITION naming the fix where it
// is (or its capture is already invalidated, or the legacy default stream
// would join another stream's capture). A query that fails otherwise (a stream
// of another device, say) is left to the caller's own calls to report, and
// its error is cleared so that the trainer's next launch check does not find it.
absl::Status RefuseCapture(cudaStream_t stream,
                           StreamIsCapturing is_capturing = &cudaStreamIsCapturing);

}  // namespace gradex::device

#endif  // GRADEX_DEVICE_CAPTURE_H_
