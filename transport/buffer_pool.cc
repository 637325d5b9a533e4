#include "transport/buffer_pool.h"

#include <algorithm>
#include <utility>

namespace gradex::transport {

int BufferPool::Find(size_t n) const {
  int best = -1;
  for (size_t i = 0; i < kept_.size(); ++i) {
    if (kept_[i].capacity() < n) continue;
    if (best < 0 || kept_[i].capacity() < kept_[best].capacity()) best = static_cast<int>(i);
  }
  return best;
}

Bytes BufferPool::Take(size_t n) {
  const int i = n >= min_bytes_ ? Find(n) : -1;
  if (i < 0) return Bytes(n);
  Bytes b = std::move(kept_[i]);
  kept_[i] = std::move(kept_.back());
  kept_.pop_back();
  bytes_ -= b.capacity();
  ++reused_;
  b.resize(n);  // within capacity: no allocation
  return b;
}

void BufferPool::Give(Bytes b) {
  const size_t c = b.capacity();
  if (c < min_bytes_ || c > max_bytes_ || max_buffers_ == 0) return;
  // Room is made by dropping the smallest kept buffers, and only ones
  // smaller than this: decided before anything is dropped.
  std::vector<size_t> order(kept_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t x, size_t y) { return kept_[x].capacity() < kept_[y].capacity(); });
  size_t count = kept_.size(), bytes = bytes_, drop = 0;
  while (count >= max_buffers_ || bytes + c > max_bytes_) {
    if (drop == order.size() || kept_[order[drop]].capacity() >= c) return;
    bytes -= kept_[order[drop]].capacity();
    --count;
    ++drop;
  }
  std::vector<size_t> gone(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(drop));
  std::sort(gone.rbegin(), gone.rend());  // erase from the back so indices stay valid
  for (size_t i : gone) kept_.erase(kept_.begin() + static_cast<std::ptrdiff_t>(i));
  bytes_ = bytes + c;
  kept_.push_back(std::move(b));
}

}  // namespace gradex::transport
