// CUDA graph capture of the trainer's stream is refused (device/capture.h):
// the verdict for every answer of cudaStreamIsCapturing through a stand-in
// (runs everywhere), and on a GPU a real capture handed to the backend's
// RecordCaller, refused before anything joins the capture, the graph still
// valid afterwards (skips for "no device" elsewhere).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>

#include "device/capture.h"
#include "device/cuda_backend.h"
#include "device/device.h"
#include "tests/cuda_device.h"

namespace gradex::device {
namespace {

// The stand-in's answer, and the stream it was asked about.
cudaError_t g_error = cudaSuccess;
cudaStreamCaptureStatus g_status = cudaStreamCaptureStatusNone;
cudaStream_t g_asked = nullptr;
int g_calls = 0;

cudaError_t FakeIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
  g_asked = s;
  ++g_calls;
  *status = g_status;
  return g_error;
}

absl::Status Ask(cudaError_t error, cudaStreamCaptureStatus status, cudaStream_t stream) {
  g_error = error;
  g_status = status;
  g_asked = nullptr;
  g_calls = 0;
  return RefuseCapture(stream, &FakeIsCapturing);
}

bool Has(const absl::Status& s, const std::string& words) {
  return std::string(s.message()).find(words) != std::string::npos;
}

const cudaStream_t kStream = reinterpret_cast<cudaStream_t>(uintptr_t{0x1234});

TEST(RefuseCapture, AStreamNotCapturingPasses) {
  EXPECT_TRUE(Ask(cudaSuccess, cudaStreamCaptureStatusNone, kStream).ok());
  EXPECT_EQ(g_calls, 1);
  EXPECT_EQ(g_asked, kStream);
}

TEST(RefuseCapture, ACapturingStreamIsRefusedNamingTheFix) {
  const absl::Status s = Ask(cudaSuccess, cudaStreamCaptureStatusActive, kStream);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Has(s, "is capturing a CUDA graph")) << s;
  EXPECT_TRUE(Has(s,
                  "Fix: run the DDP step whose communication hook calls gradex outside the "
                  "capture"))
      << s;
  EXPECT_TRUE(Has(s, "torch.cuda.make_graphed_callables")) << s;
}

TEST(RefuseCapture, AnInvalidatedCaptureIsRefusedToo) {
  const absl::Status s = Ask(cudaSuccess, cudaStreamCaptureStatusInvalidated, kStream);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Has(s, "already invalidated")) << s;
  EXPECT_TRUE(Has(s, "Fix:")) << s;
}

// The legacy default stream cannot capture, but recording on it would join a
// blocking stream's capture: cudaStreamIsCapturing says so with an error.
TEST(RefuseCapture, TheLegacyStreamBesideACaptureIsRefused) {
  const absl::Status s =
      Ask(cudaErrorStreamCaptureImplicit, cudaStreamCaptureStatusNone, cudaStreamLegacy);
  EXPECT_EQ(g_asked, cudaStreamLegacy);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Has(s, "legacy default stream while another stream")) << s;
  EXPECT_TRUE(Has(s, "Fix:")) << s;
}

// Any other failure of the query is not a capture: the backend's own calls
// on the stream report it (a stream of another device is waited for there).
TEST(RefuseCapture, AFailedQueryIsLeftToTheCaller) {
  EXPECT_TRUE(Ask(cudaErrorInvalidResourceHandle, cudaStreamCaptureStatusNone, kStream).ok());
  EXPECT_TRUE(Ask(cudaErrorInvalidResourceHandle, cudaStreamCaptureStatusActive, kStream).ok());
}

uintptr_t Handle(cudaStream_t s) { return reinterpret_cast<uintptr_t>(s); }

// On a GPU: a trainer's stream capturing in each capture mode is refused by
// RecordCaller, which records nothing on it, so the trainer's capture ends
// with a valid graph. Stream 0 while a blocking stream captures (global
// mode) is refused as well.
TEST(RefuseCapture, ARealCaptureIsRefusedAndStaysValid) {
  SKIP_WITHOUT_DEVICE();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), 1024 * sizeof(float)), cudaSuccess);
  std::unique_ptr<Backend> backend = MakeCudaBackend();
  for (cudaStreamCaptureMode mode : {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal,
                                     cudaStreamCaptureModeRelaxed}) {
    SCOPED_TRACE(testing::Message() << "capture mode " << static_cast<int>(mode));
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaStreamBeginCapture(s, mode), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(d, 0, 1024 * sizeof(float), s), cudaSuccess);
    absl::StatusOr<std::shared_ptr<Event>> e = backend->RecordCaller(Handle(s), d);
    EXPECT_EQ(e.status().code(), absl::StatusCode::kFailedPrecondition) << e.status();
    EXPECT_TRUE(Has(e.status(), "is capturing a CUDA graph")) << e.status();
    cudaGraph_t graph = nullptr;
    EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);  // not invalidated by gradex
    EXPECT_NE(graph, nullptr);
    if (graph != nullptr) {
      size_t nodes = 0;
      EXPECT_EQ(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
      EXPECT_EQ(nodes, 1u);  // the trainer's memset only: gradex added no node
      cudaGraphDestroy(graph);
    }
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
  }
  {
    cudaStream_t blocking = nullptr;
    ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
    ASSERT_EQ(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeGlobal), cudaSuccess);
    absl::StatusOr<std::shared_ptr<Event>> e = backend->RecordCaller(0, d);
    EXPECT_EQ(e.status().code(), absl::StatusCode::kFailedPrecondition) << e.status();
    EXPECT_TRUE(Has(e.status(), "legacy default stream")) << e.status();
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(blocking, &graph);
    // Asking does not invalidate the capture (the refusal recorded nothing).
    EXPECT_EQ(end, cudaSuccess) << cudaGetErrorString(end);
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
    ASSERT_EQ(cudaStreamDestroy(blocking), cudaSuccess);
  }
  // Outside a capture the same stream is recorded on as ever.
  absl::StatusOr<std::shared_ptr<Event>> e = backend->RecordCaller(0, d);
  EXPECT_TRUE(e.ok()) << e.status();
  cudaFree(d);
}

}  // namespace
}  // namespace gradex::device
