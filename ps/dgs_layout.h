// DGS (Dual-Way Gradient Sparsification, docs/architecture.md "DGS";
// DESIGN.md "DGS") works per layer: a worker pushes the top R% of each
// layer, a server returns the top R% of each layer of its model difference.
// This file holds the model layout every party agrees on (layer sizes in
// order, flat float32 of `total()` elements) and the contiguous element range
// each server shard owns.
//
// A shard's range may cut a layer; the server then works on the layer's
// piece inside its range ("piece" below): its secondary compression keeps the
// top R% of each piece, which is the top R% per layer when a layer lies in
// one shard (the default, one shard per host, on layer-sized models).
#ifndef GRADEX_PS_DGS_LAYOUT_H_
#define GRADEX_PS_DGS_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "catalog/catalog.h"

namespace gradex::ps {

// The most layers and elements a layout may have: element indices travel as
// uint32 (kernels/sparse.h), and every count a peer sends is bounded by these.
inline constexpr uint32_t kDgsMaxLayers = 1u << 20;
inline constexpr uint64_t kDgsMaxElements = (uint64_t{1} << 32) - 1;
// The most server shards a model may be split into (the catalog's bound).
inline constexpr uint32_t kDgsMaxShards = catalog::kMaxParameterServerShards;

// A contiguous element range [begin, end) of the flat model.
struct DgsRange {
  uint32_t begin = 0;
  uint32_t end = 0;
  uint32_t size() const { return end - begin; }
  bool operator==(const DgsRange&) const = default;
};

class DgsLayout {
 public:
  // Refused (INVALID_ARGUMENT naming the layer) when there are no layers, a
  // layer is empty, there are more than kDgsMaxLayers layers or the total
  // exceeds kDgsMaxElements.
  static absl::StatusOr<DgsLayout> Create(std::vector<uint32_t> layer_sizes);

  uint32_t layers() const { return static_cast<uint32_t>(sizes_.size()); }
  uint64_t total() const { return offsets_.back(); }
  const std::vector<uint32_t>& layer_sizes() const { return sizes_; }
  // Layer j is [layer(j).begin, layer(j).end) of the flat model.
  DgsRange layer(uint32_t j) const {
    return {static_cast<uint32_t>(offsets_[j]), static_cast<uint32_t>(offsets_[j + 1])};
  }

  // FNV-1a 64 over the layer count and sizes: carried in every DGS message so
  // that a worker and a server built for different models refuse each other.
  uint64_t fingerprint() const { return fingerprint_; }

  // The layer pieces of `range` in order: each layer's intersection with it,
  // empty ones left out. Pieces are the unit of the server's top-R% and of
  // the frames (one frame per piece).
  std::vector<DgsRange> Pieces(DgsRange range) const;

  // Splits the model into `shards` contiguous ranges covering it in order,
  // sizes differing by at most one element (a shard may cut layers). Refused
  // when shards is 0, above kDgsMaxShards or above total().
  absl::StatusOr<std::vector<DgsRange>> SplitShards(uint32_t shards) const;

 private:
  DgsLayout() = default;
  std::vector<uint32_t> sizes_;
  std::vector<uint64_t> offsets_{0};  // offsets_[j] = first element of layer j
  uint64_t fingerprint_ = 0;
};

// k of a top-R% selection over `size` elements at ratio `ratio` in (0, 1]:
// ceil(ratio · size), at least 1, at most size. ratio >= 1 keeps everything
// (ASGD's dense exchange).
uint32_t DgsKeep(uint32_t size, double ratio);

}  // namespace gradex::ps

#endif  // GRADEX_PS_DGS_LAYOUT_H_
