#include "collectives/wire/sparse_stream.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "collectives/wire/frame_walk.h"
#include "collectives/wire/qsgd.h"

namespace gradex::collectives::wire {

void SparseStream::Assign(kernels::SparseVec v) {
  dense_ = false;
  dense_values_.clear();
  sparse_ = std::move(v);
  MaybeSwitch();
}

void SparseStream::Add(kernels::SparseView other) {
  if (dense_) {
    kernels::ScatterAdd(other, range_.begin, 1.0f, dense_values_.data());
    return;
  }
  kernels::MergeAdd(kernels::View(sparse_), other, &scratch_);
  std::swap(sparse_, scratch_);
  MaybeSwitch();
}

void SparseStream::MaybeSwitch() {
  if (policy_ == StreamPolicy::kDynamic && !dense_ &&
      static_cast<double>(sparse_.nnz()) > SparseStreamDelta(range_.size())) {
    Densify();
  }
}

void SparseStream::Densify() {
  if (dense_) return;
  dense_values_.assign(range_.size(), 0.0f);
  kernels::ScatterAdd(kernels::View(sparse_), range_.begin, 1.0f, dense_values_.data());
  sparse_.clear();
  dense_ = true;
}

uint64_t SparseStream::AppendFrame(const FrameMeta& meta, int quantize_bits, uint64_t seed,
                                   transport::Bytes* out, kernels::SparseVec* error) {
  if (!dense_) return AppendSparseFrame(meta, range_, kernels::View(sparse_), out);
  if (quantize_bits == 0) {
    AppendDenseFrame(meta, range_, dense_values_.data(), out);
    return kDenseFrameMark;
  }
  std::vector<float> q;
  AppendQuantizedFrame(meta, range_, dense_values_.data(), quantize_bits, seed, out, &q);
  // Error feedback: x - Q(x) stays with this rank; it holds Q(x) like everyone.
  error->clear();
  for (uint32_t i = 0; i < range_.size(); ++i) {
    const float e = dense_values_[i] - q[i];
    if (e != 0.0f || dense_values_[i] != q[i]) {
      error->idx.push_back(range_.begin + i);
      error->val.push_back(e);
    }
  }
  dense_values_ = std::move(q);
  return kDenseFrameMark;
}

void SparseStream::NonZeros(kernels::SparseVec* out) const {
  if (dense_) {
    kernels::DenseToSparse(dense_values_.data(), range_.size(), range_.begin, out);
    return;
  }
  out->clear();
  for (size_t i = 0; i < sparse_.nnz(); ++i) {
    if (sparse_.val[i] == 0.0f) continue;
    out->idx.push_back(sparse_.idx[i]);
    out->val.push_back(sparse_.val[i]);
  }
}

uint64_t AppendSparseFrame(const FrameMeta& meta, BlockRange range, kernels::SparseView v,
                           transport::Bytes* out) {
  uint32_t nnz = 0;
  for (size_t i = 0; i < v.nnz; ++i) nnz += v.val[i] != 0.0f;
  const FrameHeader h = MakeFrameHeader(meta, range, kFrameSparse, nnz);
  const size_t at = out->size();
  out->resize(at + sizeof h + size_t{nnz} * 8);
  std::memcpy(out->data() + at, &h, sizeof h);
  uint8_t* idx = out->data() + at + sizeof h;
  uint8_t* val = idx + size_t{nnz} * 4;
  for (size_t i = 0, j = 0; i < v.nnz; ++i) {
    if (v.val[i] == 0.0f) continue;
    std::memcpy(idx + 4 * j, &v.idx[i], 4);
    std::memcpy(val + 4 * j++, &v.val[i], 4);
  }
  return nnz;
}

uint64_t StreamFrameBytes(uint32_t size, uint64_t mark, int quantize_bits) {
  if (mark != kDenseFrameMark) return sizeof(FrameHeader) + mark * 8;
  if (quantize_bits > 0) return QuantizedFrameBytes(size, quantize_bits);
  return sizeof(FrameHeader) + uint64_t{size} * 4;
}

absl::Status CheckDecodedCapacity(const std::vector<kernels::SparseVec>& blocks,
                                  std::span<const ExpectedBlock> expected) {
  for (size_t b = 0; b < expected.size(); ++b) {
    if (blocks[b].nnz() > expected[b].capacity) {
      return absl::DataLossError(
          absl::StrCat("bad frame (over_capacity): a dense frame for [", expected[b].range.begin,
                       ",", expected[b].range.end, ") holds ", blocks[b].nnz(),
                       " nonzeros, more than the capacity ", expected[b].capacity));
    }
  }
  return absl::OkStatus();
}

void SplitFrames(const transport::Bytes& message, std::vector<std::pair<size_t, size_t>>* spans,
                 std::vector<uint64_t>* marks) {
  spans->clear();
  marks->clear();
  FrameAt f;
  for (size_t at = 0; at < message.size(); at = f.end()) {
    if (ReadFrameAt(message, at, &f) != FrameShape::kOk || !f.fits()) {
      // Not validated after all: the rest as one span the decoder refuses.
      spans->emplace_back(at, message.size() - at);
      marks->push_back(0);
      return;
    }
    spans->emplace_back(at, f.end() - at);
    marks->push_back((f.header.flags & kFrameDense) != 0 ? kDenseFrameMark : f.header.count);
  }
}

}  // namespace gradex::collectives::wire
