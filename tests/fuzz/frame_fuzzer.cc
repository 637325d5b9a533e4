// libFuzzer target for the data-plane frame parser (collectives/wire/frame.h).
// Input: a 14-byte schedule (what the receiver expects) then the message.
//   byte 0: bit 0 = DecodeDenseBlock (else DecodeSparseBlocks), bit 1 = accumulate
//   byte 1: expected blocks - 1 (mod 4)
//   bytes 2..13: per block, size (uint16 LE, mod 2048) and capacity (uint8)
// On success the decoded output must keep the parser's promises (indices sorted,
// unique and inside their block, counts within capacity); a broken promise aborts.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "collectives/wire/frame.h"
#include "tests/fuzz/frame_fuzz_meta.h"

using gradex::collectives::wire::BlockRange;
using gradex::collectives::wire::ExpectedBlock;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < gradex::fuzz::kScheduleBytes) return 0;
  const gradex::fuzz::Schedule sched = gradex::fuzz::ReadSchedule(data);
  // The message in its own buffer, as a transport delivers it.
  const gradex::transport::Bytes message(data + gradex::fuzz::kScheduleBytes, data + size);
  const gradex::collectives::wire::FrameMeta meta = gradex::fuzz::Meta();

  if (sched.dense) {
    const BlockRange range = sched.blocks[0].range;
    std::vector<float> out(range.size(), 1.0f);
    absl::Status s = gradex::collectives::wire::DecodeDenseBlock(message, meta, range,
                                                                 sched.accumulate, out.data());
    (void)s;
    return 0;
  }
  std::vector<gradex::kernels::SparseVec> out;
  absl::Status s = gradex::collectives::wire::DecodeSparseBlocks(
      message, meta, std::span<const ExpectedBlock>(sched.blocks.data(), sched.count), &out);
  if (!s.ok()) return 0;
  if (out.size() != sched.count) std::abort();
  for (size_t b = 0; b < sched.count; ++b) {
    const auto& v = out[b];
    const BlockRange r = sched.blocks[b].range;
    if (v.idx.size() != v.val.size() || v.nnz() > r.size()) std::abort();
    for (size_t i = 0; i < v.nnz(); ++i) {
      if (v.idx[i] < r.begin || v.idx[i] >= r.end) std::abort();
      if (i > 0 && v.idx[i] <= v.idx[i - 1]) std::abort();
    }
  }
  return 0;
}
