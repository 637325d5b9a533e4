// The message patterns Ok-Topk is built from, written against Link (the one
// way every algorithm sends): a rotated, bucketed all-to-all (split and reduce, data
// balancing), a Bruck all-gather of several blocks per member (the
// all-gatherv), and an all-gather of small unsigned words (boundary
// agreement, buffer sizes, histograms of the exact global selection).
#ifndef GRADEX_COLLECTIVES_ALGORITHMS_OKTOPK_OKTOPK_EXCHANGE_H_
#define GRADEX_COLLECTIVES_ALGORITHMS_OKTOPK_OKTOPK_EXCHANGE_H_

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/link.h"
#include "kernels/sparse.h"

namespace gradex::collectives::algorithms::oktopk {

// Phases stamped on Ok-Topk frames (and used in tags).
enum OkTopkPhase : uint16_t {
  kOkPhaseBoundaries = 1,
  kOkPhaseSplitReduce = 2,
  kOkPhaseCounts = 3,
  kOkPhaseHistogram = 4,
  kOkPhaseBalance = 5,
  kOkPhaseAllGather = 6,
};

// COO entries and frames framed and decoded in one call (the volume model's
// inputs, copied into CallStats at the end).
struct WireCount {
  uint64_t entries_sent = 0, entries_recv = 0, frames_sent = 0, frames_recv = 0;
};

// Appends a block frame and counts the nonzero entries it carries.
void AppendCounted(const wire::FrameMeta& meta, wire::BlockRange range, kernels::SparseView block,
                   WireCount* wire, transport::Bytes* out);
// Decodes one message of frames for `expected` and counts what came.
absl::Status DecodeCounted(const transport::Bytes& message, const wire::FrameMeta& meta,
                           std::span<const wire::ExpectedBlock> expected, WireCount* wire,
                           std::vector<kernels::SparseVec>* out);

// One peer of a rotated all-to-all: at offset d (1..P-1) this rank sends
// `out[d]` to rank + d when `send[d]`, and receives from rank - d when
// `recv[d]`. Offsets run in order in buckets of at most `window` peers in
// flight; `on_recv(d, message)` runs for each receive of a bucket after the
// bucket completes and while the next bucket is in flight (the paper's
// overlap of the reduction with communication).
struct AllToAllPlan {
  std::vector<bool> send, recv;       // indexed by offset, size P
  std::vector<transport::Bytes> out;  // indexed by offset
};
absl::Status RotatedAllToAll(
    Link& link, uint16_t phase, int window, AllToAllPlan plan,
    const std::function<absl::Status(int, const transport::Bytes&)>& on_recv);

// Bruck all-gather over all ranks where member j contributes the blocks
// expect[j] (several frames, in order). On return (*all)[j] holds member j's
// blocks. `mine` must match expect[rank] in length.
absl::Status BruckAllGatherBlocks(Link& link,
                                  const std::vector<std::vector<wire::ExpectedBlock>>& expect,
                                  uint16_t phase, uint32_t sub_base, PhaseTimes* times,
                                  WireCount* wire, std::vector<kernels::SparseVec> mine,
                                  std::vector<std::vector<kernels::SparseVec>>* all);

// All-gather of `words.size()` (the same on every rank) uint32 words per rank.
// Words travel as two float32 halves of 16 bits (exact), every received half
// checked to be an integer in [0, 65535]. Returns words[rank][i].
absl::StatusOr<std::vector<std::vector<uint32_t>>> AllGatherWords(Link& link,
                                                                  std::span<const uint32_t> words,
                                                                  uint16_t phase, uint32_t sub_base,
                                                                  PhaseTimes* times,
                                                                  WireCount* wire);

}  // namespace gradex::collectives::algorithms::oktopk

#endif  // GRADEX_COLLECTIVES_ALGORITHMS_OKTOPK_OKTOPK_EXCHANGE_H_
