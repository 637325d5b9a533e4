// Passes over every frame of a whole message (collectives/wire/frame.h), at the
// link: the sender's rank stamped as it goes out and checked as it arrives,
// and no non-finite value sent.
#include <cstddef>
#include <cstring>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "collectives/wire/frame.h"
#include "collectives/wire/frame_walk.h"
#include "kernels/sparse.h"

namespace gradex::collectives::wire {
namespace {

// Walks the frames of a message (ReadFrameAt), handing each header and its
// offset to `fn`. A message that does not parse (magic, version, flags,
// lengths) ends the walk with OUT_OF_RANGE, uncounted: the decoder rejects
// it with the precise reason.
template <typename Fn>
absl::Status ForEachFrame(const transport::Bytes& m, Fn&& fn) {
  size_t offset = 0;
  while (offset < m.size()) {
    FrameAt f;
    if (ReadFrameAt(m, offset, &f) != FrameShape::kOk) {
      return absl::OutOfRangeError("malformed message");
    }
    if (absl::Status s = fn(offset, f.header); !s.ok()) return s;
    if (!f.fits()) return absl::OutOfRangeError("malformed message");
    offset = f.end();
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status StampFrameSenders(transport::Bytes* m, uint32_t sender) {
  absl::Status s = ForEachFrame(*m, [&](size_t offset, const FrameHeader&) {
    std::memcpy(m->data() + offset + offsetof(FrameHeader, sender), &sender, sizeof sender);
    return absl::OkStatus();
  });
  if (s.ok()) return s;
  return absl::InternalError("sending a message that is not frames");
}

absl::Status CheckFrameSenders(const transport::Bytes& m, uint32_t expected) {
  absl::Status s = ForEachFrame(m, [&](size_t, const FrameHeader& h) {
    if (h.sender == expected) return absl::OkStatus();
    return RejectFrame(FrameError::kWrongSender, absl::StrCat("frame from rank ", h.sender,
                                                              ", received from rank ", expected));
  });
  return s.code() == absl::StatusCode::kOutOfRange ? absl::OkStatus() : s;
}

bool IsSumOverflow(const absl::Status& s) {
  return s.code() == absl::StatusCode::kDataLoss &&
         std::string_view(s.message().data(), s.message().size()).find(kSumOverflowed) !=
             std::string_view::npos;
}

absl::Status CheckFramesFinite(const transport::Bytes& m) {
  absl::Status s = ForEachFrame(m, [&](size_t offset, const FrameHeader& h) {
    if ((h.flags & kFrameQuantized) != 0) return absl::OkStatus();
    const bool sparse = (h.flags & kFrameSparse) != 0;
    const uint8_t* body = m.data() + offset + sizeof(FrameHeader);
    const uint8_t* values = sparse ? body + size_t{h.count} * sizeof(uint32_t) : body;
    if (const size_t i = kernels::FirstNonFinite(reinterpret_cast<const float*>(values), h.count);
        i < h.count) {
      uint32_t element = h.block_begin + i;
      if (sparse) std::memcpy(&element, body + size_t{i} * sizeof(uint32_t), sizeof element);
      return absl::DataLossError(absl::StrCat(
          kSumOverflowed, " at element ", element,
          " before it was sent (every value summed was finite: this epoch refuses NaN and "
          "infinite ones); every rank fails this step and keeps its contribution"));
    }
    return absl::OkStatus();
  });
  return s.code() == absl::StatusCode::kOutOfRange ? absl::OkStatus() : s;
}

}  // namespace gradex::collectives::wire
