#include "collectives/algorithms/sparcml_split.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "collectives/algorithms/sparse_steps.h"
#include "collectives/block_layout.h"
#include "collectives/call_frame.h"
#include "collectives/link.h"
#include "collectives/phase_timer.h"
#include "collectives/wire/qsgd.h"

namespace gradex::collectives::algorithms {
namespace {

int Mod(int a, int m) { return ((a % m) + m) % m; }

// The entries of sorted `v` inside `range`, as a vector.
kernels::SparseVec Part(const kernels::SparseVec& v, wire::BlockRange range) {
  auto lo = std::lower_bound(v.idx.begin(), v.idx.end(), range.begin);
  auto hi = std::lower_bound(lo, v.idx.end(), range.end);
  const size_t a = lo - v.idx.begin(), b = hi - v.idx.begin();
  kernels::SparseVec p;
  p.idx.assign(v.idx.begin() + a, v.idx.begin() + b);
  p.val.assign(v.val.begin() + a, v.val.begin() + b);
  return p;
}

// A slice the all-gather holds: its frame (forwarded verbatim), the frame's
// mark for the volume model, and its nonzeros.
struct Gathered {
  transport::Bytes frame;
  uint64_t mark = 0;
  kernels::SparseVec values;
};

}  // namespace

size_t SumOfSelectionsCapacity(int world, size_t n, double density) {
  return std::min(n, static_cast<size_t>(world) * KeepCount(density, n));
}

absl::StatusOr<Volume> SparcmlSplit::ModelVolume(int rank, int world, size_t n,
                                                 const AllreduceOptions& options,
                                                 const CallStats& observed) const {
  const BlockLayout layout(n, world, 1.0);
  const auto& sent = observed.stream_frames_sent;
  const auto& recv = observed.stream_frames_recv;
  size_t frames = world - 1;
  for (int dist = 1; dist < world; dist <<= 1) frames += std::min(dist, world - dist);
  if (sent.size() != frames || recv.size() != frames) {
    return absl::InvalidArgumentError(absl::StrCat("expected ", frames, " frames each way, got ",
                                                   sent.size(), " sent and ", recv.size()));
  }
  const int bits = static_cast<int>(Param(options, "quantize_bits"));
  auto size = [&](int b) { return layout.range(Mod(b, world)).size(); };
  Volume v;
  size_t f = 0;
  for (int s = 1; s < world; ++s, ++f) {
    v.sent_bytes += wire::StreamFrameBytes(size(rank + s), sent[f], bits);
    v.recv_bytes += wire::StreamFrameBytes(size(rank), recv[f], bits);
    ++v.messages;
  }
  for (int dist = 1; dist < world; dist <<= 1) {
    for (int j = 0; j < std::min(dist, world - dist); ++j, ++f) {
      v.sent_bytes += wire::StreamFrameBytes(size(rank + j), sent[f], bits);
      v.recv_bytes += wire::StreamFrameBytes(size(rank + dist + j), recv[f], bits);
    }
    ++v.messages;
  }
  return v;
}

absl::Status SparcmlSplit::CheckOptions(const CallContext&, const AllreduceOptions& options) const {
  return wire::ValidateQuantizeBits(static_cast<int>(Param(options, "quantize_bits")));
}

absl::Status SparcmlSplit::LocalSelection(const CallContext&, const AllreduceOptions& options,
                                          LocalInput& in, ResidualLedger& ledger,
                                          CallStats* stats) {
  local_.Select(in, KeepCount(options.density, in.size()), options.threshold_reuse, ledger, stats,
                &mine_);
  return absl::OkStatus();
}

absl::Status SparcmlSplit::Exchange(const CallContext& ctx, const AllreduceOptions& options,
                                    std::span<float> acc, ResidualLedger& ledger,
                                    AllreduceResult* result, CallStats* stats) {
  absl::Status st;
  const int p = ctx.transport->size();
  const int r = ctx.transport->rank();
  const size_t n = acc.size();
  PhaseTimes* times = &stats->phases;
  Link link(ctx, id(), times);
  const BlockLayout layout(n, p, 1.0);
  const size_t k = KeepCount(options.density, n);
  // Static streams never go dense, so there is nothing to quantize.
  const int bits =
      gather_form() == GatherForm::kStatic ? 0 : static_cast<int>(Param(options, "quantize_bits"));
  kernels::SparseVec mine = std::move(mine_), error;
  mine_ = {};

  // Split reduce-scatter: step s sends slice r+s to its owner, receives this
  // rank's slice from r-s and adds it (the owner alone sums: any order works).
  wire::SparseStream owned(layout.range(r), policy());
  owned.Assign(Part(mine, layout.range(r)));
  std::vector<kernels::SparseVec> received;
  std::vector<std::pair<size_t, size_t>> spans;
  std::vector<uint64_t> marks;
  const wire::FrameMeta scatter_meta = link.meta(kPhaseSplitScatter);
  const wire::ExpectedBlock mine_expected{
      layout.range(r), static_cast<uint32_t>(std::min<size_t>(k, layout.range(r).size()))};
  for (int s = 1; s < p && st.ok(); ++s) {
    const int to = Mod(r + s, p), from = Mod(r - s, p);
    transport::Bytes out;
    {
      PhaseTimer t(&times->communication_s);
      wire::SparseStream part(layout.range(to), policy());
      part.Assign(Part(mine, layout.range(to)));
      stats->stream_frames_sent.push_back(part.AppendFrame(
          scatter_meta, bits, wire::QsgdSeed(scatter_meta, r, layout.range(to)), &out, &error));
      if (part.dense() && bits > 0) ledger.Discarded(std::move(error), 1.0f);
    }
    absl::StatusOr<transport::Bytes> in =
        link.Exchange(to, std::move(out), from, kPhaseSplitScatter, s);
    if (!in.ok()) {
      st = in.status();
      break;
    }
    {
      PhaseTimer t(&times->communication_s);
      st = wire::DecodeSparseBlocks(*in, link.meta(kPhaseSplitScatter, from), {&mine_expected, 1},
                                    &received);
      if (st.ok()) st = wire::CheckDecodedCapacity(received, {&mine_expected, 1});
      if (!st.ok()) break;
      wire::SplitFrames(*in, &spans, &marks);
      stats->stream_frames_recv.push_back(marks[0]);
    }
    PhaseTimer t(&times->reduction_s);
    owned.Add(kernels::View(received[0]));
  }

  // All-gather (Bruck): frames are forwarded as received, so a quantized
  // slice reaches everyone with the bytes its owner encoded.
  const size_t slice_cap = std::min(n, static_cast<size_t>(p) * k);
  std::vector<Gathered> gathered(1);
  const wire::FrameMeta gather_meta = link.meta(kPhaseSplitGather);
  if (st.ok()) {
    PhaseTimer t(&times->communication_s);
    if (gather_form() == GatherForm::kDense) owned.Densify();
    const int gather_bits = owned.dense() ? bits : 0;
    gathered[0].mark =
        owned.AppendFrame(gather_meta, gather_bits, wire::QsgdSeed(gather_meta, r, layout.range(r)),
                          &gathered[0].frame, &error);
    if (owned.dense() && gather_bits > 0) ledger.Discarded(std::move(error), 1.0f);
    owned.NonZeros(&gathered[0].values);
  }
  std::vector<wire::ExpectedBlock> want;
  for (int dist = 1, sub = 0; dist < p && st.ok(); dist <<= 1, ++sub) {
    const int count = std::min(dist, p - dist);
    transport::Bytes out;
    for (int j = 0; j < count; ++j) {
      out.insert(out.end(), gathered[j].frame.begin(), gathered[j].frame.end());
      stats->stream_frames_sent.push_back(gathered[j].mark);
    }
    absl::StatusOr<transport::Bytes> in =
        link.Exchange(Mod(r - dist, p), std::move(out), Mod(r + dist, p), kPhaseSplitGather, sub);
    if (!in.ok()) {
      st = in.status();
      break;
    }
    PhaseTimer t(&times->communication_s);
    want.clear();
    for (int j = 0; j < count; ++j) {
      wire::BlockRange range = layout.range(Mod(r + dist + j, p));
      want.push_back({range, static_cast<uint32_t>(std::min<size_t>(slice_cap, range.size()))});
    }
    st = wire::DecodeSparseBlocks(*in, link.meta(kPhaseSplitGather, Mod(r + dist, p)), want,
                                  &received);
    if (st.ok()) st = wire::CheckDecodedCapacity(received, want);
    if (!st.ok()) break;
    wire::SplitFrames(*in, &spans, &marks);
    for (int j = 0; j < count; ++j) {
      Gathered g;
      g.frame.assign(in->begin() + spans[j].first, in->begin() + spans[j].first + spans[j].second);
      g.mark = marks[j];
      g.values = std::move(received[j]);
      stats->stream_frames_recv.push_back(g.mark);
      gathered.push_back(std::move(g));
    }
  }
  if (!st.ok()) return st;
  {
    PhaseTimer t(&times->reduction_s);
    std::vector<kernels::SparseVec> slices(p);
    for (int j = 0; j < p; ++j) slices[Mod(r + j, p)] = std::move(gathered[j].values);
    result->dense.clear();
    result->is_dense = gather_form() == GatherForm::kDense;
    ConcatBlocks(slices, &result->sparse);
    if (result->is_dense) {
      result->dense.assign(n, 0.0f);
      kernels::ScatterAdd(kernels::View(result->sparse), 0, 1.0f, result->dense.data());
      result->sparse.clear();
    }
  }
  stats->result_nnz = result->CountNonZeros();
  stats->result_capacity = SumOfSelectionsCapacity(p, n, options.density);
  return absl::OkStatus();
}

}  // namespace gradex::collectives::algorithms
