#include "collectives/algorithms/sparse_steps.h"

#include <algorithm>

#include "collectives/phase_timer.h"

namespace gradex::collectives::algorithms {
namespace {

int Mod(int a, int m) { return ((a % m) + m) % m; }

// Cuts `block` to `keep` entries, booking what it drops to the ledger.
void Reselect(kernels::SparseVec* block, size_t keep, bool keep_cancelled, ResidualLedger& ledger) {
  if (block->nnz() <= keep) return;
  kernels::SparseVec kept, dropped;
  CutToKeep(kernels::View(*block), keep, keep_cancelled, &kept, &dropped);
  ledger.Discarded(std::move(dropped), 1.0f);
  *block = std::move(kept);
}

}  // namespace

void MergeSums(kernels::SparseView a, kernels::SparseView b, bool keep_cancelled,
               kernels::SparseVec* out) {
  if (keep_cancelled) {
    kernels::MergeAddKeepCancelled(a, b, out);
  } else {
    kernels::MergeAdd(a, b, out);
  }
}

void CutToKeep(kernels::SparseView in, size_t k, bool keep_cancelled, kernels::SparseVec* kept,
               kernels::SparseVec* dropped) {
  kernels::SparseTopK(in, k, kept, dropped);
  if (!keep_cancelled || kept->nnz() >= k) return;
  kernels::SparseVec cancelled, rest;
  for (size_t i = 0; i < dropped->nnz(); ++i) {
    const bool take = cancelled.nnz() + kept->nnz() < k && kernels::IsPresent(dropped->val[i]) &&
                      dropped->val[i] == 0.0f;
    kernels::SparseVec& to = take ? cancelled : rest;
    to.idx.push_back(dropped->idx[i]);
    to.val.push_back(dropped->val[i]);
  }
  if (cancelled.nnz() == 0) return;
  // Disjoint indices: MergeAdd copies each value as it is, -0 included.
  kernels::MergeAdd(kernels::View(*kept), kernels::View(cancelled), kept);
  *dropped = std::move(rest);
}

void DropZeros(kernels::SparseVec* v) {
  size_t j = 0;
  for (size_t i = 0; i < v->nnz(); ++i) {
    if (!kernels::IsPresent(v->val[i])) continue;
    v->idx[j] = v->idx[i];
    v->val[j++] = v->val[i];
  }
  v->idx.resize(j);
  v->val.resize(j);
}

void ConcatBlocks(std::vector<kernels::SparseVec>& blocks, kernels::SparseVec* out) {
  size_t total = 0;
  for (const auto& b : blocks) total += b.nnz();
  out->clear();
  out->idx.reserve(total);
  out->val.reserve(total);
  for (const auto& b : blocks) {
    out->idx.insert(out->idx.end(), b.idx.begin(), b.idx.end());
    out->val.insert(out->val.end(), b.val.begin(), b.val.end());
  }
}

std::vector<size_t> SrsLocalKeeps(const BlockLayout& layout, int me) {
  const int q = layout.parts();
  const int steps = CeilLog2(q);
  std::vector<size_t> mult(q, 1);  // by distance t from me
  for (int s = 1; s <= steps; ++s) {
    const int d = 1 << (steps - s);
    const int count = std::min(d, q - d);  // blocks me .. me + count - 1 arrive
    for (int t = 0; t < count; ++t) ++mult[t];
  }
  std::vector<size_t> keeps(q);
  for (int t = 0; t < q; ++t) {
    const int b = Mod(me + t, q);
    keeps[b] = std::min<size_t>(layout.keep(b) * mult[t], layout.range(b).size());
  }
  return keeps;
}

absl::Status SparReduceScatter(Link& link, const Group& group, const BlockLayout& layout,
                               std::vector<kernels::SparseVec> held, uint16_t phase,
                               bool keep_cancelled, ResidualLedger& ledger, PhaseTimes* times,
                               kernels::SparseVec* owned) {
  const int q = group.size();
  const int me = group.me;
  if (held.size() != static_cast<size_t>(q)) {
    return absl::InternalError("Spar-Reduce-Scatter without its first selection");
  }
  const int steps = CeilLog2(q);
  std::vector<wire::ExpectedBlock> expect;
  std::vector<kernels::SparseVec> received;
  kernels::SparseVec merged;
  for (int s = 1; s <= steps; ++s) {
    const int d = 1 << (steps - s);
    const int count = std::min(d, q - d);  // blocks in the bag, sent and received
    transport::Bytes out;
    {
      PhaseTimer t(&times->selection_s);
      for (int j = 0; j < count; ++j)
        Reselect(&held[Mod(me + d + j, q)], layout.keep(Mod(me + d + j, q)), keep_cancelled,
                 ledger);
    }
    {
      PhaseTimer t(&times->communication_s);
      for (int j = 0; j < count; ++j) {
        int b = Mod(me + d + j, q);
        wire::AppendBlockFrame(link.meta(phase), layout.range(b), kernels::View(held[b]), &out);
        held[b] = {};  // sent: no longer ours
      }
    }
    expect.clear();
    for (int j = 0; j < count; ++j) expect.push_back(layout.expect(Mod(me + j, q)));
    // The bag holds `count` blocks of at most their kept entries.
    absl::StatusOr<transport::Bytes> in = link.Exchange(
        group.at(d), std::move(out), group.at(-d), phase, s, wire::ExpectedMessageBytes(expect));
    if (!in.ok()) return in.status();
    {
      PhaseTimer t(&times->communication_s);
      absl::Status st =
          wire::DecodeSparseBlocks(*in, link.meta(phase, group.at(-d)), expect, &received);
      if (!st.ok()) return st;
    }
    PhaseTimer t(&times->reduction_s);
    for (int j = 0; j < count; ++j) {
      int b = Mod(me + j, q);
      MergeSums(kernels::View(held[b]), kernels::View(received[j]), keep_cancelled, &merged);
      std::swap(held[b], merged);
    }
  }
  {
    PhaseTimer t(&times->selection_s);
    Reselect(&held[me], layout.keep(me), keep_cancelled, ledger);
  }
  *owned = std::move(held[me]);
  return absl::OkStatus();
}

absl::Status BruckAllGather(Link& link, const Group& group,
                            std::span<const wire::ExpectedBlock> expect, uint16_t phase,
                            PhaseTimes* times, kernels::SparseVec mine,
                            std::vector<kernels::SparseVec>* all) {
  const int q = group.size();
  const int me = group.me;
  // gathered[j] is the block of member me + j.
  std::vector<kernels::SparseVec> gathered;
  gathered.reserve(q);
  gathered.push_back(std::move(mine));
  std::vector<wire::ExpectedBlock> want;
  std::vector<kernels::SparseVec> received;
  int sub = 0;
  for (int dist = 1; dist < q; dist <<= 1, ++sub) {
    const int count = std::min(dist, q - dist);
    transport::Bytes out;
    {
      PhaseTimer t(&times->communication_s);
      for (int j = 0; j < count; ++j) {
        wire::AppendBlockFrame(link.meta(phase), expect[Mod(me + j, q)].range,
                               kernels::View(gathered[j]), &out);
      }
    }
    want.clear();
    for (int j = 0; j < count; ++j) want.push_back(expect[Mod(me + dist + j, q)]);
    absl::StatusOr<transport::Bytes> in =
        link.Exchange(group.at(-dist), std::move(out), group.at(dist), phase, sub,
                      wire::ExpectedMessageBytes(want));
    if (!in.ok()) return in.status();
    PhaseTimer t(&times->communication_s);
    absl::Status st =
        wire::DecodeSparseBlocks(*in, link.meta(phase, group.at(dist)), want, &received);
    if (!st.ok()) return st;
    for (auto& r : received) gathered.push_back(std::move(r));
  }
  all->assign(q, {});
  for (int j = 0; j < q; ++j) (*all)[Mod(me + j, q)] = std::move(gathered[j]);
  return absl::OkStatus();
}

}  // namespace gradex::collectives::algorithms
