// Large message buffers kept for reuse. A fresh multi-megabyte vector costs
// page faults and a zero fill on first touch (a 25 MB receive paid ~12 ms of
// them on this project's test machine, more than the copy it held); one kept
// from a finished send costs neither. Bounded in count and bytes, so the
// pool never holds more than it is told to.
#ifndef GRADEX_TRANSPORT_BUFFER_POOL_H_
#define GRADEX_TRANSPORT_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "transport/transport.h"

namespace gradex::transport {

class BufferPool {
 public:
  // Keeps buffers of at least `min_bytes` capacity, at most `max_buffers` of
  // them and `max_bytes` of capacity in all.
  BufferPool(size_t min_bytes, size_t max_buffers, size_t max_bytes)
      : min_bytes_(min_bytes), max_buffers_(max_buffers), max_bytes_(max_bytes) {}

  // Whether Take(n) would reuse a kept buffer.
  bool Has(size_t n) const { return n >= min_bytes_ && Find(n) >= 0; }

  // A buffer of size `n`: the smallest kept one that holds it, resized
  // within its capacity (only the part beyond its previous size is filled;
  // the rest keeps old contents), else a new zeroed one.
  Bytes Take(size_t n);

  // Keeps `b` if it is large enough and fits the bounds (evicting smaller
  // kept buffers for a larger one); otherwise frees it.
  void Give(Bytes b);

  size_t buffers() const { return kept_.size(); }
  size_t bytes() const { return bytes_; }
  uint64_t reused() const { return reused_; }

 private:
  int Find(size_t n) const;

  const size_t min_bytes_;
  const size_t max_buffers_;
  const size_t max_bytes_;
  std::vector<Bytes> kept_;
  size_t bytes_ = 0;  // capacity of kept_
  uint64_t reused_ = 0;
};

}  // namespace gradex::transport

#endif  // GRADEX_TRANSPORT_BUFFER_POOL_H_
