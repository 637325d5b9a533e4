#include "collectives/algorithms/oktopk/oktopk_exchange.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/phase_timer.h"

namespace gradex::collectives::algorithms::oktopk {
namespace {

int Mod(int a, int m) { return ((a % m) + m) % m; }

}  // namespace

void AppendCounted(const wire::FrameMeta& meta, wire::BlockRange range, kernels::SparseView block,
                   WireCount* wire, transport::Bytes* out) {
  for (size_t i = 0; i < block.nnz; ++i) wire->entries_sent += kernels::IsPresent(block.val[i]);
  ++wire->frames_sent;
  wire::AppendBlockFrame(meta, range, block, out);
}

absl::Status DecodeCounted(const transport::Bytes& message, const wire::FrameMeta& meta,
                           std::span<const wire::ExpectedBlock> expected, WireCount* wire,
                           std::vector<kernels::SparseVec>* out) {
  absl::Status st = wire::DecodeSparseBlocks(message, meta, expected, out);
  if (!st.ok()) return st;
  wire->frames_recv += expected.size();
  for (const auto& v : *out) wire->entries_recv += v.nnz();
  return absl::OkStatus();
}

absl::Status RotatedAllToAll(
    Link& link, uint16_t phase, int window, AllToAllPlan plan,
    const std::function<absl::Status(int, const transport::Bytes&)>& on_recv) {
  const int p = link.size(), me = link.rank();
  window = std::max(1, window);
  struct Posted {
    int offset;
    Link::Pending send, recv;
    transport::Bytes in;
  };
  // Posts the bucket of offsets [first, first + window); the sub of offset d
  // is d.
  auto post = [&](int first, std::vector<Posted>* bucket) -> absl::Status {
    bucket->clear();
    for (int d = first; d < std::min(p, first + window); ++d) {
      Posted x{d, {}, {}, {}};
      const uint32_t sub = static_cast<uint32_t>(d);
      if (plan.recv[d]) {
        absl::StatusOr<Link::Pending> r = link.PostRecv(Mod(me - d, p), phase, sub);
        if (!r.ok()) return r.status();
        x.recv = *r;
      }
      if (plan.send[d]) {
        absl::StatusOr<Link::Pending> s =
            link.PostSend(Mod(me + d, p), std::move(plan.out[d]), phase, sub);
        if (!s.ok()) return s.status();
        x.send = *s;
      }
      bucket->push_back(std::move(x));
    }
    return absl::OkStatus();
  };
  auto complete = [&](std::vector<Posted>* bucket) -> absl::Status {
    for (Posted& x : *bucket) {
      if (!x.recv.posted()) continue;
      absl::Status s = link.Wait(x.recv, &x.in);
      if (!s.ok()) return s;
    }
    for (Posted& x : *bucket) {
      if (!x.send.posted()) continue;
      absl::Status s = link.Wait(x.send, nullptr);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  };
  std::vector<Posted> current, next;
  absl::Status st = post(1, &current);
  for (int first = 1; st.ok() && first < p; first += window) {
    st = complete(&current);
    if (!st.ok()) break;
    // The next bucket flies while this one is reduced.
    if (first + window < p) st = post(first + window, &next);
    if (!st.ok()) break;
    for (Posted& x : current) {
      if (x.recv.posted()) st = on_recv(x.offset, x.in);
      if (!st.ok()) break;
    }
    std::swap(current, next);
  }
  return st;
}

absl::Status BruckAllGatherBlocks(Link& link,
                                  const std::vector<std::vector<wire::ExpectedBlock>>& expect,
                                  uint16_t phase, uint32_t sub_base, PhaseTimes* times,
                                  WireCount* wire, std::vector<kernels::SparseVec> mine,
                                  std::vector<std::vector<kernels::SparseVec>>* all) {
  const int p = link.size(), me = link.rank();
  // gathered[j] holds the blocks of member me + j.
  std::vector<std::vector<kernels::SparseVec>> gathered;
  gathered.reserve(p);
  gathered.push_back(std::move(mine));
  std::vector<wire::ExpectedBlock> want;
  std::vector<kernels::SparseVec> received;
  uint32_t sub = sub_base;
  for (int dist = 1; dist < p; dist <<= 1, ++sub) {
    const int count = std::min(dist, p - dist);
    transport::Bytes out;
    {
      PhaseTimer t(&times->communication_s);
      for (int j = 0; j < count; ++j) {
        const auto& ex = expect[Mod(me + j, p)];
        for (size_t b = 0; b < ex.size(); ++b) {
          AppendCounted(link.meta(phase), ex[b].range, kernels::View(gathered[j][b]), wire, &out);
        }
      }
    }
    absl::StatusOr<transport::Bytes> in =
        link.Exchange(Mod(me - dist, p), std::move(out), Mod(me + dist, p), phase, sub);
    if (!in.ok()) return in.status();
    PhaseTimer t(&times->communication_s);
    want.clear();
    for (int j = 0; j < count; ++j) {
      const auto& ex = expect[Mod(me + dist + j, p)];
      want.insert(want.end(), ex.begin(), ex.end());
    }
    absl::Status st =
        DecodeCounted(*in, link.meta(phase, Mod(me + dist, p)), want, wire, &received);
    if (!st.ok()) return st;
    size_t at = 0;
    for (int j = 0; j < count; ++j) {
      const size_t m = expect[Mod(me + dist + j, p)].size();
      std::vector<kernels::SparseVec> blocks(m);
      for (size_t b = 0; b < m; ++b) blocks[b] = std::move(received[at++]);
      gathered.push_back(std::move(blocks));
    }
  }
  all->assign(p, {});
  for (int j = 0; j < p; ++j) (*all)[Mod(me + j, p)] = std::move(gathered[j]);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::vector<uint32_t>>> AllGatherWords(Link& link,
                                                                  std::span<const uint32_t> words,
                                                                  uint16_t phase, uint32_t sub_base,
                                                                  PhaseTimes* times,
                                                                  WireCount* wire) {
  const int p = link.size(), me = link.rank();
  const uint32_t m = static_cast<uint32_t>(words.size());
  // Member j's words w occupy positions 2(jm + w) (high half) and +1 (low).
  std::vector<std::vector<wire::ExpectedBlock>> expect(p);
  for (int j = 0; j < p; ++j) {
    expect[j].push_back({{2 * m * j, 2 * m * (j + 1)}, 2 * m});
  }
  std::vector<kernels::SparseVec> mine(1);
  for (uint32_t w = 0; w < m; ++w) {
    const uint32_t halves[2] = {words[w] >> 16, words[w] & 0xffffu};
    for (uint32_t h = 0; h < 2; ++h) {
      if (halves[h] == 0) continue;  // zeros never travel
      mine[0].idx.push_back(2 * (m * me + w) + h);
      mine[0].val.push_back(static_cast<float>(halves[h]));
    }
  }
  std::vector<std::vector<kernels::SparseVec>> all;
  absl::Status st =
      BruckAllGatherBlocks(link, expect, phase, sub_base, times, wire, std::move(mine), &all);
  if (!st.ok()) return st;
  std::vector<std::vector<uint32_t>> out(p, std::vector<uint32_t>(m, 0));
  for (int j = 0; j < p; ++j) {
    const kernels::SparseVec& v = all[j][0];
    for (size_t i = 0; i < v.nnz(); ++i) {
      const float x = v.val[i];
      if (!(x >= 1.0f && x <= 65535.0f && x == std::floor(x))) {
        return absl::DataLossError(absl::StrCat("rank ", me, " oktopk phase ", phase,
                                                ": word half ", x, " from rank ", j,
                                                " is not an integer in [1, 65535]"));
      }
      const uint32_t pos = v.idx[i] - 2 * m * j;  // in range: the frame was validated
      const uint32_t half = static_cast<uint32_t>(x);
      out[j][pos / 2] |= pos % 2 == 0 ? half << 16 : half;
    }
  }
  return out;
}

}  // namespace gradex::collectives::algorithms::oktopk
