// Residuals keyed by parameter span (ParamSpan::key), not by bucket index, so
// they survive DDP's bucket rebuild after the first iteration (issue 9). Each
// bucket layout (its spans in order) has one agent::BucketSlot: a residual
// laid out like the bucket, and the bucket's algorithm objects. Every span
// lives in exactly one layout at a time; a bucket whose spans live elsewhere
// moves their residuals in before it runs (the old place is zeroed), so
// nothing is lost or counted twice. Layouts left with no span are dropped.
// Not thread-safe: the client's selection thread owns it.
#ifndef GRADEX_SERVICES_CLIENT_RESIDUAL_STORE_H_
#define GRADEX_SERVICES_CLIENT_RESIDUAL_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "services/agent/agent.h"
#include "services/client/client.h"

namespace gradex::client {

class ResidualStore {
 public:
  // The slot of the bucket laid out as `spans`, with the residuals of every
  // span moved in. INVALID_ARGUMENT (nothing moved) for an empty layout, a
  // span of 0 elements, a key twice, or a key whose element count differs
  // from what the store holds for it.
  absl::StatusOr<agent::BucketSlot*> Gather(std::span<const ParamSpan> spans);

  // The slots Gather(spans) would read or write (its own, if it exists, and
  // every slot that holds one of the spans' residuals now). A pure lookup:
  // the client's selection thread gathers a bucket while another exchanges
  // only when this does not name the exchanging bucket's slot.
  std::vector<const agent::BucketSlot*> Touched(std::span<const ParamSpan> spans) const;

  // Every span's residual, by key.
  std::map<uint64_t, std::vector<float>> Export() const;
  // Replaces everything held with `residuals` (each span in a layout of its
  // own until a bucket gathers it).
  void Import(std::map<uint64_t, std::vector<float>> residuals);

  size_t layouts() const { return layouts_.size(); }
  size_t spans() const { return homes_.size(); }

 private:
  using LayoutKey = std::vector<std::pair<uint64_t, size_t>>;
  struct Layout {
    std::vector<ParamSpan> spans;
    std::vector<size_t> offsets;  // of each span in the residual
    size_t live = 0;              // spans whose residual lives here
    agent::BucketSlot slot;
  };
  struct Home {
    Layout* layout = nullptr;
    size_t offset = 0;
    size_t elements = 0;
  };
  Layout* Make(std::span<const ParamSpan> spans);

  std::map<LayoutKey, std::unique_ptr<Layout>> layouts_;
  std::map<uint64_t, Home> homes_;  // where each span's residual lives
};

}  // namespace gradex::client

#endif  // GRADEX_SERVICES_CLIENT_RESIDUAL_STORE_H_
