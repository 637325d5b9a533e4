// The schedule encoding shared by the frame fuzzer and its seed generator.
#ifndef GRADEX_TESTS_FUZZ_FRAME_FUZZ_META_H_
#define GRADEX_TESTS_FUZZ_FRAME_FUZZ_META_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "collectives/wire/frame.h"

namespace gradex::fuzz {

inline constexpr size_t kScheduleBytes = 14;
inline constexpr uint32_t kFirstBlock = 100;  // blocks are contiguous from here

struct Schedule {
  bool dense = false;
  bool accumulate = false;
  size_t count = 1;
  std::array<collectives::wire::ExpectedBlock, 4> blocks{};
};

// Fixed header fields: a mismatch is one of the rejections worth reaching.
inline collectives::wire::FrameMeta Meta() {
  collectives::wire::FrameMeta m;
  m.job_id = 7;
  m.epoch = 3;
  m.step = 42;
  m.algorithm = collectives::wire::CatalogId("spardl");
  m.phase = 2;
  return m;
}

inline Schedule ReadSchedule(const uint8_t* d) {
  Schedule s;
  s.dense = d[0] & 1;
  s.accumulate = d[0] & 2;
  s.count = 1 + d[1] % 4;
  uint32_t begin = kFirstBlock;
  for (size_t b = 0; b < 4; ++b) {
    const uint8_t* p = d + 2 + 3 * b;
    uint32_t n = (p[0] | (uint32_t{p[1]} << 8)) % 2048;
    s.blocks[b].range = collectives::wire::BlockRange{begin, begin + n};
    s.blocks[b].capacity = p[2];
    begin += n;
  }
  return s;
}

}  // namespace gradex::fuzz

#endif  // GRADEX_TESTS_FUZZ_FRAME_FUZZ_META_H_
