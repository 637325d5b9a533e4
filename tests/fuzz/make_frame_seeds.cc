// Writes the frame fuzzer's seed corpus: valid sparse, dense and quantized
// frames for the fixed schedule encoding, plus a few near-misses.
// Usage: make_frame_seeds DIR
#include <cstdio>
#include <string>
#include <vector>

#include "collectives/wire/frame.h"
#include "kernels/qsgd.h"
#include "tests/fuzz/frame_fuzz_meta.h"

namespace gradex::fuzz {
namespace {

struct Block {
  uint16_t size;
  uint8_t capacity;
};

transport::Bytes ScheduleBytes(bool dense, bool accumulate, std::vector<Block> blocks) {
  transport::Bytes s(kScheduleBytes, 0);
  s[0] = (dense ? 1 : 0) | (accumulate ? 2 : 0);
  s[1] = static_cast<uint8_t>(blocks.size() - 1);
  for (size_t b = 0; b < blocks.size(); ++b) {
    s[2 + 3 * b] = blocks[b].size & 0xff;
    s[3 + 3 * b] = blocks[b].size >> 8;
    s[4 + 3 * b] = blocks[b].capacity;
  }
  return s;
}

void AppendQuantized(collectives::wire::BlockRange r, int bits, transport::Bytes* out) {
  std::vector<float> x(r.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 3 == 0) ? 0.5f - 0.01f * i : 0.0f;
  collectives::wire::FrameMeta m = Meta();
  collectives::wire::FrameHeader h{
      collectives::wire::kFrameMagic,
      collectives::wire::kFrameVersion,
      collectives::wire::kFrameDense | collectives::wire::kFrameQuantized,
      m.job_id,
      m.epoch,
      static_cast<uint16_t>(m.algorithm),
      m.phase,
      m.step,
      r.begin,
      r.end,
      r.size(),
      0};
  const uint8_t* hp = reinterpret_cast<const uint8_t*>(&h);
  out->insert(out->end(), hp, hp + sizeof h);
  size_t at = out->size();
  out->resize(at + kernels::QsgdPayloadBytes(x.size(), bits));
  kernels::QsgdEncode(x.data(), x.size(), bits, 1234, out->data() + at);
}

void AppendSparse(collectives::wire::BlockRange r, std::vector<uint32_t> offsets,
                  transport::Bytes* out) {
  std::vector<uint32_t> idx;
  std::vector<float> val;
  for (uint32_t o : offsets) {
    idx.push_back(r.begin + o);
    val.push_back(1.0f + o);
  }
  collectives::wire::AppendBlockFrame(Meta(), r,
                                      kernels::SparseView{idx.data(), val.data(), idx.size()}, out);
}

void Write(const std::string& dir, const std::string& name, const transport::Bytes& sched,
           const transport::Bytes& msg) {
  std::FILE* f = std::fopen((dir + "/" + name).c_str(), "wb");
  if (f == nullptr) {
    std::perror(name.c_str());
    std::exit(1);
  }
  std::fwrite(sched.data(), 1, sched.size(), f);
  std::fwrite(msg.data(), 1, msg.size(), f);
  std::fclose(f);
}

}  // namespace
}  // namespace gradex::fuzz

int main(int argc, char** argv) {
  using namespace gradex;
  using namespace gradex::fuzz;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const uint32_t b0 = kFirstBlock;
  Bytes m;
  // One sparse block, 3 of 64 entries.
  AppendSparse({b0, b0 + 64}, {1, 5, 63}, &m);
  Write(dir, "sparse_one_block", ScheduleBytes(false, false, {{64, 8}}), m);
  // Two blocks: sparse, then one dense enough to go dense on the wire.
  m.clear();
  AppendSparse({b0, b0 + 16}, {0, 15}, &m);
  std::vector<uint32_t> all;
  for (uint32_t i = 0; i < 8; ++i) all.push_back(i);
  AppendSparse({b0 + 16, b0 + 24}, all, &m);
  Write(dir, "sparse_then_dense", ScheduleBytes(false, false, {{16, 4}, {8, 8}}), m);
  // Empty block (size 0) between two blocks, and an all-zero block.
  m.clear();
  AppendSparse({b0, b0 + 10}, {3}, &m);
  AppendSparse({b0 + 10, b0 + 10}, {}, &m);
  AppendSparse({b0 + 10, b0 + 20}, {}, &m);
  Write(dir, "empty_blocks", ScheduleBytes(false, false, {{10, 2}, {0, 0}, {10, 0}}), m);
  // Quantized frames decoded as sparse blocks (QSGD 4 and 2 bits).
  m.clear();
  AppendQuantized({b0, b0 + 33}, 4, &m);
  AppendQuantized({b0 + 33, b0 + 40}, 2, &m);
  Write(dir, "sparse_quantized", ScheduleBytes(false, false, {{33, 0}, {7, 0}}), m);
  // Dense decode: plain, accumulate.
  m.clear();
  std::vector<float> v(20);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25f * i;
  AppendDenseFrame(Meta(), {b0, b0 + 20}, v.data(), &m);
  Write(dir, "dense_accumulate", ScheduleBytes(true, true, {{20, 0}}), m);
  // Dense decode of a quantized frame (8 bits).
  m.clear();
  AppendQuantized({b0, b0 + 100}, 8, &m);
  Write(dir, "dense_quantized8", ScheduleBytes(true, false, {{100, 0}}), m);
  // Near-misses: a frame cut inside its payload, and a sparse frame over capacity.
  m.clear();
  AppendSparse({b0, b0 + 64}, {1, 2, 3, 4}, &m);
  Bytes cut(m.begin(), m.end() - 3);
  Write(dir, "truncated", ScheduleBytes(false, false, {{64, 8}}), cut);
  Write(dir, "over_capacity", ScheduleBytes(false, false, {{64, 2}}), m);
  return 0;
}
