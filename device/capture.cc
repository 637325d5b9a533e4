#include "device/capture.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace gradex::device {

namespace {

// The fix, the same in every refusal.
constexpr char kFix[] =
    "gradex exchanges between ranks on the host, so its step cannot be part of a CUDA graph. "
    "Fix: run the DDP step whose communication hook calls gradex outside the capture (graph "
    "only the model's forward and backward, e.g. with torch.cuda.make_graphed_callables, and "
    "leave DDP's gradient exchange out of the graph), or pass host memory";

}  // namespace

absl::Status RefuseCapture(cudaStream_t stream, StreamIsCapturing is_capturing) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t e = is_capturing(stream, &status);
  if (e == cudaErrorStreamCaptureImplicit) {
    cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat(
        "Memory::kDevice: the bucket was handed over on the legacy default stream while another "
        "stream of its device captures a CUDA graph (cudaStreamIsCapturing: ",
        cudaGetErrorString(e), "): recording on it would join that capture. ", kFix));
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    return absl::OkStatus();
  }
  if (status == cudaStreamCaptureStatusNone) return absl::OkStatus();
  const std::string what = status == cudaStreamCaptureStatusActive
                               ? "is capturing a CUDA graph"
                               : "is in a CUDA graph capture that is already invalidated";
  return absl::FailedPreconditionError(absl::StrCat(
      "Memory::kDevice: the stream the bucket was handed over on ", what,
      " (cudaStreamIsCapturing); gradex refuses it rather than join the capture. ", kFix));
}

}  // namespace gradex::device
