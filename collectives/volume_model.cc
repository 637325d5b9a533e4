#include "collectives/volume_model.h"

#include <algorithm>

namespace gradex::collectives {
namespace {

int Mod(int a, int m) { return ((a % m) + m) % m; }

}  // namespace

Volume SrsAndBruckVolume(const BlockLayout& layout, int me) {
  Volume v;
  const int q = layout.parts();
  auto bytes = [&](int b) { return wire::FrameBytes(layout.range(b).size(), layout.keep(b)); };
  const int steps = CeilLog2(q);
  for (int s = 1; s <= steps; ++s) {
    const int d = 1 << (steps - s);
    const int count = std::min(d, q - d);
    for (int j = 0; j < count; ++j) {
      v.sent_bytes += bytes(Mod(me + d + j, q));
      v.recv_bytes += bytes(Mod(me + j, q));
    }
    ++v.messages;
  }
  for (int dist = 1; dist < q; dist <<= 1) {
    const int count = std::min(dist, q - dist);
    for (int j = 0; j < count; ++j) {
      v.sent_bytes += bytes(Mod(me + j, q));
      v.recv_bytes += bytes(Mod(me + dist + j, q));
    }
    ++v.messages;
  }
  return v;
}

}  // namespace gradex::collectives
