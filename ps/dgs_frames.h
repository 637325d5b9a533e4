// DGS wire messages between a worker and a server shard (docs/architecture.md
// "DGS"). One message = a DgsMessageHeader, then one frame per layer piece of
// the shard's range (collectives/wire/frame.h's FrameHeader: job, epoch, algorithm
// = the catalog id of "dgs", phase = the message kind, step = the version,
// block = the piece, sparse or dense payload, whichever is smaller).
//
//   worker -> shard: kHello (join or rejoin: the worker's parameters of the
//                    range, dense; the shard uses them only while it has no
//                    model yet) and kPush (the worker's sparsified update,
//                    the signed change to add to M, on top of `version`, the
//                    version of the worker's last pull from this shard) and
//                    kLeave (no frames, no reply: the worker is done, so it
//                    no longer counts for max_staleness).
//                    kDensePush (R = 1, ASGD: the change for the whole
//                    range, one dense frame per piece, values only);
//   shard -> worker: kPull (G_k's top R% per piece, to add to the params),
//                    (kFullSync also names the worker's last push the shard
//                    did not apply, so that a worker that gave up on it can
//                    put it back: DgsMessageHeader::unapplied),
//                    kDensePull (R = 1: the whole of M − v_k, dense),
//                    kFullSync (the whole M of the range, dense, to copy) and
//                    kRefused (no frames; `reason` says why; the worker must
//                    rejoin with a hello).
//
// Every decode bounds every field by what the receiver already knows
// (DgsWireContext) before anything is stored: worker id among the shard's
// workers and equal to the one the transport rank belongs to, the layout
// fingerprint, the shard id, the piece count and each piece's range, counts
// <= piece size, indices sorted, unique and inside the piece, values finite,
// lengths exact. The state-dependent checks (versions, staleness, joined)
// are DgsServerShard's and DgsWorkerState's. A refusal is a DgsRefusal and
// an absl::Status whose message names the field; nothing of a refused
// message is applied.
#ifndef GRADEX_PS_DGS_FRAMES_H_
#define GRADEX_PS_DGS_FRAMES_H_

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/sparse.h"
#include "ps/dgs_layout.h"
#include "transport/transport.h"

namespace gradex::ps {

inline constexpr uint32_t kDgsMagic = 0x31534744;  // "DGS1"
inline constexpr uint16_t kDgsFormat = 1;

enum class DgsKind : uint16_t {
  kHello = 1,
  kPush = 2,
  kPull = 3,
  kFullSync = 4,
  kRefused = 5,
  kLeave = 6,
  // R = 1 (ASGD, density 1): every piece a dense frame of values only, so
  // that neither side builds indices or per-entry lists for a whole model.
  kDensePush = 7,
  kDensePull = 8,
};

#pragma pack(push, 1)
struct DgsMessageHeader {
  uint32_t magic;
  uint16_t format;
  uint16_t kind;  // DgsKind
  uint64_t job_id;
  uint32_t epoch;
  uint32_t worker;  // the worker that sends (hello, push) or is addressed (pull, sync, refused)
  uint32_t shard;
  uint32_t pieces;       // frames that follow: the range's layer pieces (0: kRefused, kLeave)
  uint64_t fingerprint;  // DgsLayout::fingerprint()
  // kPush: the version of the worker's last pull from this shard (its base).
  // kPull / kFullSync: the shard's version the worker is at once applied.
  // kHello: the version of the worker's last reply from this shard (0: none),
  // so a shard restored from an older snapshot sees how far it is behind.
  // kRefused: the shard's version.
  uint64_t version;
  float ratio;      // kPush: the R of the worker's selection, in (0, 1]; kDensePush: 1; else 0
  uint32_t reason;  // kRefused: a DgsRefusal; else 0
  // The worker's request number (hello, push), echoed in the shard's reply,
  // so that a reply to a request the worker gave up on (deadline) is told
  // apart from the one it waits for and dropped.
  uint32_t request;
  // kFullSync: the request number of this worker's last push the shard did
  // not apply (refused, or held and then dropped when the worker's hello
  // superseded it), 0 when none, so that a worker that gave up waiting can
  // put that push back; any other kind: 0.
  uint32_t unapplied;
};
#pragma pack(pop)
static_assert(sizeof(DgsMessageHeader) == 64);

// Why a message (or a push, by the shard's state) was refused. Stable codes:
// they travel in kRefused and label the metrics.
enum class DgsRefusal : uint32_t {
  kNone = 0,
  kTruncated,        // shorter than its headers and payloads say
  kBadMagic,         // message or frame magic / format / frame version
  kWrongKind,        // a kind the receiver does not take there
  kWrongJob,         // job id or epoch
  kWrongWorker,      // worker id unknown, or not the one of the sending rank
  kWrongShard,       // shard id
  kWrongLayout,      // layout fingerprint
  kBadRatio,         // ratio not in (0, 1]
  kWrongPieces,      // piece count, a frame's block, algorithm, phase, step or sender
  kBadFlags,         // a frame neither dense nor sparse, or quantized
  kOverCapacity,     // more entries than the piece has elements
  kBadLength,        // bytes left over after the last frame
  kIndexOutOfRange,  // an index outside its piece
  kUnsortedIndices,  // indices not strictly increasing
  kNonFinite,        // a NaN or Inf value (it would poison M for good)
  kNotJoined,        // a push from a worker that has not said hello since it (or the shard) started
  kVersionAhead,     // a version above the shard's
  kStaleVersion,     // a base version other than the one the shard last sent that worker
  kBeyondStaleness,  // the push is more than max_staleness versions behind
  kNoModel,          // a hello to a shard without a model, carrying none
  kOverflow,         // finite values whose sum into M or a worker's M − v_k would not be
  kCount,
};
std::string_view DgsRefusalName(DgsRefusal r);
using DgsRefusalCounts = std::array<uint64_t, static_cast<size_t>(DgsRefusal::kCount)>;

// What the receiver knows before it reads a byte.
struct DgsWireContext {
  uint64_t job_id = 0;
  uint32_t epoch = 0;
  const DgsLayout* layout = nullptr;
  uint32_t shard = 0;
  DgsRange range;        // the shard's range
  uint32_t workers = 0;  // worker ids are 0 .. workers-1
};

// A decoded message. Sparse entries carry global element indices, sorted,
// inside the shard's range; dense values cover the range (kHello,
// kFullSync, kDensePush, kDensePull). In a dense push or pull a zero means
// "no entry": receivers add only nonzeros, as for sparse entries, so that
// both routes give the same bits (a +0 added to a −0 would not).
struct DgsMessage {
  DgsKind kind = DgsKind::kRefused;
  uint32_t worker = 0;
  uint32_t shard = 0;
  uint64_t version = 0;
  float ratio = 0;
  DgsRefusal reason = DgsRefusal::kNone;
  uint32_t request = 0;
  uint32_t unapplied = 0;     // kFullSync: see DgsMessageHeader::unapplied
  kernels::SparseVec sparse;  // kPush, kPull
  std::vector<float> dense;   // kHello, kFullSync, kDensePush, kDensePull: range.size() values
};

// Encoders. `entries` hold global indices sorted inside ctx.range (others
// are a caller bug: checked, INVALID_ARGUMENT). `values` is the range's
// values (range.size()).
// The shard's replies echo the request number of the message they answer.
// `room`, when given, is a spent buffer whose capacity the message reuses
// (a dense message is the whole range: a fresh one costs page faults).
absl::StatusOr<transport::Bytes> EncodeDgsHello(const DgsWireContext& ctx, uint32_t worker,
                                                uint32_t request, std::span<const float> values,
                                                uint64_t last_version = 0);
absl::StatusOr<transport::Bytes> EncodeDgsPush(const DgsWireContext& ctx, uint32_t worker,
                                               uint32_t request, uint64_t base_version, float ratio,
                                               kernels::SparseView entries);
// A kDensePush: `change` is the range's signed change (range.size() values).
absl::StatusOr<transport::Bytes> EncodeDgsDensePush(const DgsWireContext& ctx, uint32_t worker,
                                                    uint32_t request, uint64_t base_version,
                                                    std::span<const float> change,
                                                    transport::Bytes room = {});
// A kPull (entries), kDensePull or kFullSync (dense) reply, as DgsServerShard made it.
absl::StatusOr<transport::Bytes> EncodeDgsReply(const DgsWireContext& ctx, const DgsMessage& reply,
                                                transport::Bytes room = {});
transport::Bytes EncodeDgsLeave(const DgsWireContext& ctx, uint32_t worker, uint32_t request);
transport::Bytes EncodeDgsRefused(const DgsWireContext& ctx, uint32_t worker, uint32_t request,
                                  uint64_t version, DgsRefusal reason);

// Decodes a worker's message (kHello, kPush, kDensePush or kLeave) received from the transport
// rank that belongs to `worker`. On refusal returns DATA_LOSS (or
// INVALID_ARGUMENT for a bad context) naming the field, sets *why, and
// leaves `out` unspecified (never to be applied).
absl::Status DecodeDgsFromWorker(std::span<const uint8_t> message, const DgsWireContext& ctx,
                                 uint32_t worker, DgsMessage* out, DgsRefusal* why);
// Decodes a shard's message to `worker` (kPull, kDensePull, kFullSync or kRefused).
absl::Status DecodeDgsFromShard(std::span<const uint8_t> message, const DgsWireContext& ctx,
                                uint32_t worker, DgsMessage* out, DgsRefusal* why);

// The most bytes a DGS message for `range` can take (every piece dense):
// the receive cap (Transport::PostRecvAtMost) in both directions.
uint64_t DgsMaxMessageBytes(const DgsLayout& layout, DgsRange range);

}  // namespace gradex::ps

#endif  // GRADEX_PS_DGS_FRAMES_H_
