// The fixture of the DGS frame tests: a layout of layers 6, 10, 5, a shard
// of [0, 11) with 3 workers, worker 1's push, and a decoder that checks a
// refusal's message names its reason.
#ifndef GRADEX_TESTS_DGS_DGS_FRAMES_FIXTURE_H_
#define GRADEX_TESTS_DGS_DGS_FRAMES_FIXTURE_H_

#include <cstring>

#include "collectives/wire/frame.h"
#include "tests/dgs/dgs_util.h"

namespace gradex::dgs_test {

template <typename T>
void Put(transport::Bytes& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
}

inline constexpr size_t kFrame0 = sizeof(ps::DgsMessageHeader);  // first frame header
inline constexpr size_t kPayload0 =
    kFrame0 + sizeof(collectives::wire::FrameHeader);  // its payload

class DgsFrames : public ::testing::Test {
 protected:
  DgsFrames()
      : layout_(MakeLayout({6, 10, 5})),
        shard_(*ps::DgsServerShard::Create(layout_, 0, {0, 11}, {.workers = 3})) {
    ctx_ = Context(shard_);
  }
  // Worker 1's push: piece [0,6) holds {1: 2}, piece [6,11) holds {7: -3, 9: 1}.
  transport::Bytes Push(uint64_t base = 0) {
    kernels::SparseVec e;
    e.idx = {1, 7, 9};
    e.val = {2, -3, 1};
    absl::StatusOr<transport::Bytes> b =
        ps::EncodeDgsPush(ctx_, 1, 5, base, 0.5f, kernels::View(e));
    EXPECT_TRUE(b.ok());
    return *b;
  }
  ps::DgsRefusal Decode(const transport::Bytes& b, uint32_t from = 1) {
    ps::DgsMessage m;
    ps::DgsRefusal why = ps::DgsRefusal::kNone;
    absl::Status s = ps::DecodeDgsFromWorker(b, ctx_, from, &m, &why);
    EXPECT_EQ(s.ok(), why == ps::DgsRefusal::kNone) << s;
    if (!s.ok()) {
      EXPECT_NE(std::string(s.message()).find(ps::DgsRefusalName(why)), std::string::npos) << s;
    }
    return why;
  }

  ps::DgsLayout layout_;
  ps::DgsServerShard shard_;
  ps::DgsWireContext ctx_;
};

}  // namespace gradex::dgs_test

#endif  // GRADEX_TESTS_DGS_DGS_FRAMES_FIXTURE_H_
