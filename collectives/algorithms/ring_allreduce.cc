#include "collectives/algorithms/ring_allreduce.h"

#include <utility>

#include "collectives/block_layout.h"
#include "collectives/phase_timer.h"

namespace gradex::collectives::algorithms {
namespace {

enum : uint16_t { kPhaseReduceScatter = 1, kPhaseAllGather = 2 };

int Mod(int a, int p) { return ((a % p) + p) % p; }

// Sends block `send_b` to the next rank, receives block `recv_b` from the
// previous one and adds (reduce-scatter) or copies (all-gather) it.
absl::Status Step(Link& link, const BlockLayout& layout, float* data, int send_b, int recv_b,
                  uint16_t phase, int sub, bool accumulate, PhaseTimes* times) {
  const int p = link.size(), r = link.rank();
  transport::Bytes out;
  {
    PhaseTimer t(&times->communication_s);
    wire::BlockRange range = layout.range(send_b);
    out = link.Buffer(wire::FrameBytes(range.size(), range.size()));
    wire::AppendDenseFrame(link.meta(phase), range, data + range.begin, &out);
  }
  // The message is one dense frame of block recv_b: capped at exactly that.
  const wire::BlockRange want = layout.range(recv_b);
  absl::StatusOr<transport::Bytes> in =
      link.Exchange((r + 1) % p, std::move(out), (r + p - 1) % p, phase, sub,
                    wire::FrameBytes(want.size(), want.size()));
  if (!in.ok()) return in.status();
  PhaseTimer t(accumulate ? &times->reduction_s : &times->communication_s);
  wire::BlockRange range = layout.range(recv_b);
  absl::Status st = wire::DecodeDenseBlock(*in, link.meta(phase, (r + p - 1) % p), range,
                                           accumulate, data + range.begin);
  link.Recycle(std::move(*in));
  return st;
}

}  // namespace

absl::Status RingAllreduce(Link& link, float* data, size_t n, PhaseTimes* times) {
  const int p = link.size();
  const int r = link.rank();
  const BlockLayout layout(n, p, 1.0);
  absl::Status st;
  for (int s = 0; s < p - 1 && st.ok(); ++s) {
    st = Step(link, layout, data, Mod(r - s, p), Mod(r - s - 1, p), kPhaseReduceScatter, s, true,
              times);
  }
  for (int s = 0; s < p - 1 && st.ok(); ++s) {
    st = Step(link, layout, data, Mod(r + 1 - s, p), Mod(r - s, p), kPhaseAllGather, s, false,
              times);
  }
  return st;
}

absl::StatusOr<int> RingReduceScatter(Link& link, float* data, size_t n, uint16_t phase,
                                      PhaseTimes* times) {
  const int p = link.size();
  const int r = link.rank();
  const BlockLayout layout(n, p, 1.0);
  for (int s = 0; s < p - 1; ++s) {
    absl::Status st =
        Step(link, layout, data, Mod(r - s, p), Mod(r - s - 1, p), phase, s, true, times);
    if (!st.ok()) return st;
  }
  return Mod(r + 1, p);
}

Volume RingReduceScatterVolume(int rank, int world, size_t n) {
  const BlockLayout layout(n, world, 1.0);
  auto bytes = [&](int b) { return uint64_t{48} + 4 * uint64_t{layout.range(b).size()}; };
  Volume v;
  for (int s = 0; s < world - 1; ++s) {
    v.sent_bytes += bytes(Mod(rank - s, world));
    v.recv_bytes += bytes(Mod(rank - s - 1, world));
    v.messages += 1;
  }
  return v;
}

Volume RingAllreduceVolume(int rank, int world, size_t n) {
  const BlockLayout layout(n, world, 1.0);
  auto bytes = [&](int b) { return uint64_t{48} + 4 * uint64_t{layout.range(b).size()}; };
  Volume v;
  for (int s = 0; s < world - 1; ++s) {
    v.sent_bytes += bytes(Mod(rank - s, world)) + bytes(Mod(rank + 1 - s, world));
    v.recv_bytes += bytes(Mod(rank - s - 1, world)) + bytes(Mod(rank - s, world));
    v.messages += 2;
  }
  return v;
}

}  // namespace gradex::collectives::algorithms
