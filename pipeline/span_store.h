// A bucket's state kept per parameter span (ParamSpan::key), not per bucket
// index, so it survives DDP's bucket rebuild after the first iteration. Each
// bucket layout (its spans in order) has one BucketSlot: a residual and a
// momentum velocity laid out like the bucket, and the bucket's algorithm
// objects. Every span lives in exactly one layout at a time; a bucket whose
// spans live elsewhere moves their state in before it runs (the old place is
// zeroed), so nothing is lost or counted twice. Layouts left with no span are
// dropped. Not thread-safe: the bucket pipeline's selection thread owns it.
#ifndef GRADEX_PIPELINE_SPAN_STORE_H_
#define GRADEX_PIPELINE_SPAN_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeline/agent.h"

namespace gradex::pipeline {

// One parameter's slice of a bucket, in bucket order.
struct ParamSpan {
  uint64_t key = 0;  // stable for the parameter's life (e.g. its index in the model)
  size_t elements = 0;
};

// A span's state, for checkpoints: its residual, and its velocity when it
// has one (momentum correction after the span's first step).
struct SpanState {
  std::map<uint64_t, std::vector<float>> residuals;
  std::map<uint64_t, std::vector<float>> velocities;
};

class SpanStore {
 public:
  // The slot of the bucket laid out as `spans`, with the state of every span
  // moved in. INVALID_ARGUMENT (nothing moved) for an empty layout, a span of
  // 0 elements, a key twice, or a key whose element count differs from what
  // the store holds for it.
  absl::StatusOr<BucketSlot*> Gather(std::span<const ParamSpan> spans);

  // The slots Gather(spans) would read or write (its own, if it exists, and
  // every slot that holds one of the spans' state now). A pure lookup: the
  // pipeline's selection thread gathers a bucket while another exchanges
  // only when this does not name the exchanging bucket's slot.
  std::vector<const BucketSlot*> Touched(std::span<const ParamSpan> spans) const;
  // The slots whose state Gather(spans) would move (a span's old home and
  // its new one), none when every span already lives in the layout: the
  // pipeline brings a device-held slot's state back first, as Gather moves
  // host memory.
  std::vector<BucketSlot*> Moves(std::span<const ParamSpan> spans);
  // Every slot held.
  std::vector<BucketSlot*> Slots();

  // Every span's residual and velocity, by key.
  SpanState Export() const;
  // Replaces everything held with `state` (each span in a layout of its own
  // until a bucket gathers it). A velocity whose span has no residual, or of
  // another length, is INVALID_ARGUMENT and nothing changes.
  absl::Status Import(SpanState state);

  size_t layouts() const { return layouts_.size(); }
  size_t spans() const { return homes_.size(); }

 private:
  using LayoutKey = std::vector<std::pair<uint64_t, size_t>>;
  struct Layout {
    std::vector<ParamSpan> spans;
    std::vector<size_t> offsets;  // of each span in the residual
    size_t live = 0;              // spans whose state lives here
    BucketSlot slot;
  };
  struct Home {
    Layout* layout = nullptr;
    size_t offset = 0;
    size_t elements = 0;
    size_t index = 0;  // the span's position in its layout
  };
  Layout* Make(std::span<const ParamSpan> spans);

  std::map<LayoutKey, std::unique_ptr<Layout>> layouts_;
  std::map<uint64_t, Home> homes_;  // where each span's state lives
};

}  // namespace gradex::pipeline

#endif  // GRADEX_PIPELINE_SPAN_STORE_H_
