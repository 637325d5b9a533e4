#include "collectives/volume_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "collectives/block_layout.h"

namespace gradex {
namespace {

int Mod(int a, int m) { return ((a % m) + m) % m; }

// Spar-Reduce-Scatter then Bruck inside a group of q with member `me`.
void SrsAndBruck(const BlockLayout& layout, int me, Volume* v) {
  const int q = layout.parts();
  auto bytes = [&](int b) { return FrameBytes(layout.range(b).size(), layout.keep(b)); };
  const int steps = CeilLog2(q);
  for (int s = 1; s <= steps; ++s) {
    const int d = 1 << (steps - s);
    const int count = std::min(d, q - d);
    for (int j = 0; j < count; ++j) {
      v->sent_bytes += bytes(Mod(me + d + j, q));
      v->recv_bytes += bytes(Mod(me + j, q));
    }
    ++v->messages;
  }
  for (int dist = 1; dist < q; dist <<= 1) {
    const int count = std::min(dist, q - dist);
    for (int j = 0; j < count; ++j) {
      v->sent_bytes += bytes(Mod(me + j, q));
      v->recv_bytes += bytes(Mod(me + dist + j, q));
    }
    ++v->messages;
  }
}

}  // namespace

absl::StatusOr<Volume> ModelVolume(std::string_view algorithm, int rank, int world, size_t n,
                                   const AllreduceOptions& options, size_t kprime) {
  Volume v;
  if (algorithm == "dense-ring") {
    const BlockLayout layout(n, world, 1.0);
    auto bytes = [&](int b) { return uint64_t{48} + 4 * uint64_t{layout.range(b).size()}; };
    for (int s = 0; s < world - 1; ++s) {
      v.sent_bytes += bytes(Mod(rank - s, world)) + bytes(Mod(rank + 1 - s, world));
      v.recv_bytes += bytes(Mod(rank - s - 1, world)) + bytes(Mod(rank - s, world));
      v.messages += 2;
    }
    return v;
  }
  int teams = 1;
  if (algorithm == "spardl-rsag" || algorithm == "spardl-bsag") {
    teams = options.teams;
  } else if (algorithm != "spardl") {
    return absl::NotFoundError(absl::StrCat("no volume model for '", std::string(algorithm), "'"));
  }
  const int q = world / teams;
  const BlockLayout layout(n, q, options.density);
  const int me = rank % q;
  SrsAndBruck(layout, me, &v);
  const uint32_t size = layout.range(me).size();
  if (algorithm == "spardl-rsag") {
    for (int bit = 1; bit < teams; bit <<= 1) {
      v.sent_bytes += FrameBytes(size, layout.keep(me));
      v.recv_bytes += FrameBytes(size, layout.keep(me));
      ++v.messages;
    }
  } else if (algorithm == "spardl-bsag") {
    // Bruck across the teams sends and receives T-1 pieces of k' entries.
    for (int dist = 1; dist < teams; dist <<= 1) {
      const int count = std::min(dist, teams - dist);
      v.sent_bytes += count * FrameBytes(size, kprime);
      v.recv_bytes += count * FrameBytes(size, kprime);
      ++v.messages;
    }
  }
  return v;
}

double PaperSentBytes(std::string_view algorithm, int world, size_t n,
                      const AllreduceOptions& options, size_t kprime) {
  const double k = options.density * static_cast<double>(n);
  if (algorithm == "dense-ring") return 2.0 * (world - 1) / world * 4.0 * n;
  const int teams = algorithm == "spardl" ? 1 : options.teams;
  const int q = world / teams;
  double entries = 2.0 * (q - 1) * k / q;
  if (algorithm == "spardl-rsag") entries += CeilLog2(teams) * k / q;
  if (algorithm == "spardl-bsag") entries += (teams - 1) * static_cast<double>(kprime);
  return 8.0 * entries;
}

}  // namespace gradex
