// The frame header, sizes and encoders (collectives/wire/frame.h).
#include "collectives/wire/frame.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "catalog/catalog.h"

namespace gradex::collectives::wire {
namespace {

void Append(transport::Bytes* out, const void* p, size_t n) {
  if (n == 0) return;
  // insert copies once; resize would zero the room first (a second pass).
  const auto* b = static_cast<const uint8_t*>(p);
  out->insert(out->end(), b, b + n);
}

}  // namespace

AlgorithmId CatalogId(std::string_view name) {
  const catalog::AlgorithmSpec* spec = catalog::Find(name);
  return AlgorithmId{spec == nullptr ? uint16_t{0} : spec->id};
}

FrameHeader MakeFrameHeader(const FrameMeta& meta, BlockRange range, uint16_t flags,
                            uint32_t count) {
  FrameHeader h{};
  h.magic = kFrameMagic;
  h.version = kFrameVersion;
  h.flags = flags;
  h.job_id = meta.job_id;
  h.epoch = meta.epoch;
  h.algorithm = static_cast<uint16_t>(meta.algorithm);
  h.phase = meta.phase;
  h.step = meta.step;
  h.block_begin = range.begin;
  h.block_end = range.end;
  h.count = count;
  h.sender = meta.sender;
  return h;
}

uint64_t FrameBytes(uint32_t size, uint64_t nnz) {
  uint64_t sparse = nnz * (sizeof(uint32_t) + sizeof(float));
  uint64_t dense = uint64_t{size} * sizeof(float);
  return sizeof(FrameHeader) + (dense < sparse ? dense : sparse);
}

size_t ExpectedMessageBytes(std::span<const ExpectedBlock> blocks) {
  uint64_t total = 0;
  for (const ExpectedBlock& b : blocks) total += FrameBytes(b.range.size(), b.capacity);
  return static_cast<size_t>(total);
}

void AppendBlockFrame(const FrameMeta& meta, BlockRange range, kernels::SparseView block,
                      transport::Bytes* out) {
  // Only present entries (all but +0, kernels::IsPresent) go on the wire. A
  // sparse frame carries a -0 (a sum that cancelled); a dense frame's reader
  // takes it for absent, so a block whose cancelled sums must arrive is kept
  // under half its size (SparDLFamily::SendsHome).
  size_t nnz = 0;
  for (size_t i = 0; i < block.nnz; ++i) nnz += kernels::IsPresent(block.val[i]);
  const uint64_t sparse_bytes = uint64_t{nnz} * 8;
  const uint64_t dense_bytes = uint64_t{range.size()} * 4;
  out->reserve(out->size() + sizeof(FrameHeader) + std::min(sparse_bytes, dense_bytes));
  if (dense_bytes < sparse_bytes) {
    FrameHeader h = MakeFrameHeader(meta, range, kFrameDense, range.size());
    Append(out, &h, sizeof h);
    size_t at = out->size();
    out->resize(at + dense_bytes, 0);
    float* dense = reinterpret_cast<float*>(out->data() + at);
    for (size_t i = 0; i < block.nnz; ++i) dense[block.idx[i] - range.begin] = block.val[i];
    return;
  }
  FrameHeader h = MakeFrameHeader(meta, range, kFrameSparse, static_cast<uint32_t>(nnz));
  Append(out, &h, sizeof h);
  if (nnz == block.nnz) {
    Append(out, block.idx, nnz * sizeof(uint32_t));
    Append(out, block.val, nnz * sizeof(float));
    return;
  }
  size_t at = out->size();
  out->resize(at + nnz * 8);
  uint32_t* idx = reinterpret_cast<uint32_t*>(out->data() + at);
  float* val = reinterpret_cast<float*>(out->data() + at + nnz * 4);
  for (size_t i = 0, j = 0; i < block.nnz; ++i) {
    if (!kernels::IsPresent(block.val[i])) continue;
    idx[j] = block.idx[i];
    val[j++] = block.val[i];
  }
}

void AppendDenseFrame(const FrameMeta& meta, BlockRange range, const float* values,
                      transport::Bytes* out) {
  FrameHeader h = MakeFrameHeader(meta, range, kFrameDense, range.size());
  out->reserve(out->size() + sizeof h + range.size() * sizeof(float));
  Append(out, &h, sizeof h);
  Append(out, values, range.size() * sizeof(float));
}

}  // namespace gradex::collectives::wire
