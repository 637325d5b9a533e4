// sparcml-ssar-rd: SparCML's static sparse allreduce by recursive doubling
// (for small data: log2 P latencies). Every rank's top-k is a sparse stream
// over the whole gradient; at step j partners 2^j apart swap their streams
// and both add them (a + b per element, so both hold the same bits), the sum
// growing up to 2^(j+1)·k entries. Static: the result is known to stay
// sparse, so streams never switch and QSGD (dense phases only) never applies.
// Non-power-of-two P: ranks p2..P-1 (p2 = 2^floor(log2 P)) first fold their
// selection onto rank - p2 and get the result back from it at the end.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "collectives/algorithms/sparcml_split.h"
#include "collectives/block_layout.h"
#include "collectives/call_frame.h"
#include "collectives/link.h"
#include "collectives/phase_timer.h"

namespace gradex::collectives::algorithms {
namespace {

int FloorPow2(int p) {
  int p2 = 1;
  while (p2 * 2 <= p) p2 *= 2;
  return p2;
}

// Entries a sum held by the ranks of cube [base, base + width) can have: the
// selections of those ranks and of the ranks folded onto them.
uint32_t CubeCapacity(int base, int width, int world, int p2, size_t n, size_t k) {
  size_t ranks = 0;
  for (int m = base; m < base + width; ++m) ranks += 1 + (m + p2 < world ? 1 : 0);
  return static_cast<uint32_t>(std::min(n, ranks * k));
}

class SparcmlSsarRd final : public SparseAllreduce {
 public:
  std::string_view name() const override { return "sparcml-ssar-rd"; }
  // Frames are priced from what was sent: the model is exact.

  absl::StatusOr<Volume> ModelVolume(int rank, int world, size_t n, const AllreduceOptions&,
                                     const CallStats& observed) const override {
    const int p2 = FloorPow2(world);
    size_t want_sent = 0, want_recv = 0;
    if (rank >= p2) {
      want_sent = want_recv = 1;
    } else {
      want_sent = want_recv = CeilLog2(p2) + (rank + p2 < world ? 1 : 0);
    }
    const auto& sent = observed.stream_frames_sent;
    const auto& recv = observed.stream_frames_recv;
    if (sent.size() != want_sent || recv.size() != want_recv) {
      return absl::InvalidArgumentError(absl::StrCat(
          "expected ", want_sent, "/", want_recv, " frames, got ", sent.size(), "/", recv.size()));
    }
    Volume v;
    const uint32_t size = static_cast<uint32_t>(n);
    for (uint64_t m : sent) v.sent_bytes += wire::StreamFrameBytes(size, m, 0);
    for (uint64_t m : recv) v.recv_bytes += wire::StreamFrameBytes(size, m, 0);
    v.messages = sent.size();  // one frame per message
    return v;
  }

  // The local top-k is the call's local part (PrepareCall).
  absl::Status LocalSelection(const CallContext&, const AllreduceOptions& options, LocalInput& in,
                              ResidualLedger& ledger, CallStats* stats) override {
    local_.Select(in, KeepCount(options.density, in.size()), options.threshold_reuse, ledger, stats,
                  &mine_);
    return absl::OkStatus();
  }

  absl::Status Exchange(const CallContext& ctx, const AllreduceOptions& options,
                        std::span<float> acc, ResidualLedger& ledger, AllreduceResult* result,
                        CallStats* stats) override {
    absl::Status st;
    const int p = ctx.transport->size();
    const int r = ctx.transport->rank();
    const size_t n = acc.size();
    PhaseTimes* times = &stats->phases;
    Link link(ctx, id(), times);
    const size_t k = KeepCount(options.density, n);
    const int p2 = FloorPow2(p);
    const wire::BlockRange all{0, static_cast<uint32_t>(n)};
    kernels::SparseVec mine = std::move(mine_);
    mine_ = {};
    wire::SparseStream sum(all, wire::StreamPolicy::kStatic);
    sum.Assign(std::move(mine));

    std::vector<kernels::SparseVec> received;
    // Receives one frame of (phase) whose entries are at most `cap`, adds it.
    auto absorb = [&](const transport::Bytes& in, int from, uint16_t phase, uint32_t cap,
                      bool add) {
      PhaseTimer t(&times->communication_s);
      wire::ExpectedBlock want{all, cap};
      absl::Status s = wire::DecodeSparseBlocks(in, link.meta(phase, from), {&want, 1}, &received);
      if (s.ok()) s = wire::CheckDecodedCapacity(received, {&want, 1});
      if (!s.ok()) return s;
      stats->stream_frames_recv.push_back(received[0].nnz());
      PhaseTimer reduce(&times->reduction_s);
      if (add) {
        sum.Add(kernels::View(received[0]));
      } else {
        sum.Assign(std::move(received[0]));
      }
      return absl::OkStatus();
    };
    auto frame = [&](uint16_t phase, transport::Bytes* out) {
      PhaseTimer t(&times->communication_s);
      stats->stream_frames_sent.push_back(
          wire::AppendSparseFrame(link.meta(phase), all, kernels::View(sum.sparse()), out));
    };
    const uint32_t result_cap =
        static_cast<uint32_t>(SumOfSelectionsCapacity(p, n, options.density));
    if (r >= p2) {
      // Folded out: hand the selection over, get the result back.
      transport::Bytes out;
      frame(kPhaseRdFold, &out);
      st = link.Send(r - p2, std::move(out), kPhaseRdFold, 0);
      absl::StatusOr<transport::Bytes> in =
          st.ok() ? link.Recv(r - p2, kPhaseRdUnfold, 0) : absl::StatusOr<transport::Bytes>(st);
      st = in.ok() ? absorb(*in, r - p2, kPhaseRdUnfold, result_cap, false) : in.status();
    } else {
      if (r + p2 < p) {
        absl::StatusOr<transport::Bytes> in = link.Recv(r + p2, kPhaseRdFold, 0);
        st = in.ok()
                 ? absorb(*in, r + p2, kPhaseRdFold, static_cast<uint32_t>(std::min(n, k)), true)
                 : in.status();
      }
      for (int bit = 1, sub = 0; bit < p2 && st.ok(); bit <<= 1, ++sub) {
        const int partner = r ^ bit;
        transport::Bytes out;
        frame(kPhaseRdExchange, &out);
        absl::StatusOr<transport::Bytes> in =
            link.Exchange(partner, std::move(out), partner, kPhaseRdExchange, sub);
        st = in.ok() ? absorb(*in, partner, kPhaseRdExchange,
                              CubeCapacity(partner & ~(bit - 1), bit, p, p2, n, k), true)
                     : in.status();
      }
      if (st.ok() && r + p2 < p) {
        transport::Bytes out;
        frame(kPhaseRdUnfold, &out);
        st = link.Send(r + p2, std::move(out), kPhaseRdUnfold, 0);
      }
    }
    if (!st.ok()) return st;
    {
      PhaseTimer t(&times->reduction_s);
      result->is_dense = false;
      result->dense.clear();
      sum.NonZeros(&result->sparse);
    }
    stats->result_nnz = result->sparse.nnz();
    stats->result_capacity = result_cap;
    return absl::OkStatus();
  }

 protected:
  // The local top-k (LocalTopK) and an exchange that reads the residual
  // for its size: the residual may live on a device.
  bool DeviceLocalPart() const override { return true; }

 private:
  kernels::SparseVec mine_;  // LocalSelection's top-k, handed to Exchange
  LocalTopK local_;
};

}  // namespace

GRADEX_REGISTER_ALGORITHM("sparcml-ssar-rd", [] { return std::make_unique<SparcmlSsarRd>(); });

}  // namespace gradex::collectives::algorithms
