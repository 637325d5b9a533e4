#include "ps/dgs_layout.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "catalog/fnv1a.h"

namespace gradex::ps {
namespace {

// FNV-1a over the word's 8 bytes, least significant first (whatever the host's order).
uint64_t MixWord(uint64_t h, uint64_t word) {
  uint8_t bytes[8];
  for (int b = 0; b < 8; ++b) bytes[b] = static_cast<uint8_t>(word >> (8 * b));
  return catalog::Fnv1a(bytes, h);
}

}  // namespace

absl::StatusOr<DgsLayout> DgsLayout::Create(std::vector<uint32_t> layer_sizes) {
  if (layer_sizes.empty()) return absl::InvalidArgumentError("DGS layout: no layers");
  if (layer_sizes.size() > kDgsMaxLayers) {
    return absl::InvalidArgumentError(
        absl::StrCat("DGS layout: ", layer_sizes.size(), " layers > ", kDgsMaxLayers));
  }
  DgsLayout l;
  l.offsets_.reserve(layer_sizes.size() + 1);
  uint64_t h = MixWord(catalog::kFnv1aOffsetBasis, layer_sizes.size());
  for (size_t j = 0; j < layer_sizes.size(); ++j) {
    if (layer_sizes[j] == 0) {
      return absl::InvalidArgumentError(absl::StrCat("DGS layout: layer ", j, " is empty"));
    }
    const uint64_t end = l.offsets_.back() + layer_sizes[j];
    if (end > kDgsMaxElements) {
      return absl::InvalidArgumentError(
          absl::StrCat("DGS layout: layer ", j, " ends at element ", end, " > ", kDgsMaxElements));
    }
    l.offsets_.push_back(end);
    h = MixWord(h, layer_sizes[j]);
  }
  l.sizes_ = std::move(layer_sizes);
  l.fingerprint_ = h;
  return l;
}

std::vector<DgsRange> DgsLayout::Pieces(DgsRange range) const {
  std::vector<DgsRange> out;
  // The first layer that ends after range.begin.
  auto it = std::upper_bound(offsets_.begin(), offsets_.end(), uint64_t{range.begin});
  for (size_t j = (it - offsets_.begin()) - 1; j < sizes_.size() && offsets_[j] < range.end; ++j) {
    DgsRange p{static_cast<uint32_t>(std::max<uint64_t>(offsets_[j], range.begin)),
               static_cast<uint32_t>(std::min<uint64_t>(offsets_[j + 1], range.end))};
    if (p.begin < p.end) out.push_back(p);
  }
  return out;
}

absl::StatusOr<std::vector<DgsRange>> DgsLayout::SplitShards(uint32_t shards) const {
  if (shards == 0 || shards > kDgsMaxShards || shards > total()) {
    return absl::InvalidArgumentError(absl::StrCat("DGS layout: ", shards, " shards for ", total(),
                                                   " elements (1 .. min(elements, ", kDgsMaxShards,
                                                   "))"));
  }
  std::vector<DgsRange> out;
  const uint64_t base = total() / shards, extra = total() % shards;
  uint64_t at = 0;
  for (uint32_t s = 0; s < shards; ++s) {
    const uint64_t size = base + (s < extra ? 1 : 0);
    out.push_back({static_cast<uint32_t>(at), static_cast<uint32_t>(at + size)});
    at += size;
  }
  return out;
}

uint32_t DgsKeep(uint32_t size, double ratio) {
  if (!(ratio < 1.0)) return size;  // >= 1 (and NaN, refused before): everything
  if (!(ratio > 0.0)) return size == 0 ? 0 : 1;
  const double k = std::ceil(ratio * static_cast<double>(size));
  return static_cast<uint32_t>(std::clamp<double>(k, size == 0 ? 0 : 1, size));
}

}  // namespace gradex::ps
