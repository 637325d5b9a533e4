#include "member/link_probe.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "catalog/median.h"
#include "collectives/link.h"

namespace gradex::member {
namespace {

constexpr uint32_t kMagic = 0x504c5847;  // "GXLP" little-endian
constexpr size_t kHeader = 16;           // magic, epoch, size index, repetition

transport::Bytes Message(size_t size, uint32_t epoch, uint32_t index, uint32_t rep) {
  transport::Bytes b(std::max(size, kHeader), 0);
  const uint32_t h[4] = {kMagic, epoch, index, rep};
  std::memcpy(b.data(), h, kHeader);
  return b;
}

absl::Status Check(const transport::Bytes& b, size_t size, uint32_t epoch, uint32_t index,
                   uint32_t rep) {
  const size_t want = std::max(size, kHeader);
  if (b.size() != want) {
    return absl::DataLossError(absl::StrCat(b.size(), " bytes, expected ", want));
  }
  uint32_t h[4];
  std::memcpy(h, b.data(), kHeader);
  if (h[0] != kMagic || h[1] != epoch || h[2] != index || h[3] != rep) {
    return absl::DataLossError(absl::StrCat("bad header (epoch ", h[1], ", size index ", h[2],
                                            ", repetition ", h[3], ")"));
  }
  return absl::OkStatus();
}

// One ring exchange; the seconds it took.
absl::StatusOr<double> Exchange(transport::Transport& t, uint32_t epoch, size_t size,
                                uint32_t index, uint32_t rep, transport::Deadline deadline) {
  const int p = t.size(), r = t.rank();
  const int to = (r + 1) % p, from = (r - 1 + p) % p;
  const uint64_t tag = collectives::MessageTag(kProbePhase, index, rep);
  transport::Bytes out = Message(size, epoch, index, rep);  // built before the clock starts
  const transport::Clock::time_point start = transport::Clock::now();
  // A probe message is exactly `size` bytes: nothing longer is taken.
  absl::StatusOr<transport::RequestId> recv = t.PostRecvAtMost(from, tag, size);
  if (!recv.ok()) return recv.status();
  absl::StatusOr<transport::RequestId> send = t.PostSend(to, tag, std::move(out));
  absl::Status s = send.status();
  transport::Bytes in;
  if (s.ok()) s = t.Wait(*recv, deadline, &in);
  if (s.ok()) s = t.Wait(*send, deadline, nullptr);
  const double seconds = std::chrono::duration<double>(transport::Clock::now() - start).count();
  if (s.ok()) s = Check(in, size, epoch, index, rep);
  if (!s.ok()) {
    t.CancelAll(std::min(deadline, transport::DeadlineIn(std::chrono::milliseconds(100))));
    return absl::Status(
        s.code(), absl::StrCat("link probe (epoch ", epoch, ", rank ", r, ", from rank ", from,
                               ", ", size, " bytes): ", s.message()));
  }
  return seconds;
}

}  // namespace

absl::StatusOr<LinkEstimate> ProbeLinks(transport::Transport& transport, uint32_t epoch,
                                        transport::Deadline deadline,
                                        const LinkProbeOptions& options) {
  if (transport.size() < 2) {
    return absl::FailedPreconditionError("link probe: one rank has no links");
  }
  const int repeats = std::clamp(options.repeats, 1, 1000);
  const size_t sizes[2] = {std::max(options.small_bytes, kHeader),
                           std::max(options.big_bytes, options.small_bytes + 1)};
  double median[2];
  for (uint32_t index = 0; index < 2; ++index) {
    std::vector<double> times;
    // Repetition 0 is untimed: it absorbs the ranks' different start times.
    for (int rep = 0; rep <= repeats; ++rep) {
      absl::StatusOr<double> s =
          Exchange(transport, epoch, sizes[index], index, static_cast<uint32_t>(rep), deadline);
      if (!s.ok()) return s.status();
      if (rep > 0) times.push_back(*s);
    }
    median[index] = catalog::Median(times);
  }
  LinkEstimate e;
  // The proto's ranges: 0 < α < 10 s, 0 <= β < 1e-3 s/B (a clock tick of 0
  // still means some latency).
  e.alpha_s = std::clamp(median[0], 1e-9, 9.999);
  e.beta_s_per_byte =
      std::clamp((median[1] - median[0]) / static_cast<double>(sizes[1] - sizes[0]), 0.0, 0.999e-3);
  e.samples = static_cast<uint32_t>(repeats);
  return e;
}

}  // namespace gradex::member
