#include "services/client/residual_store.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"

namespace gradex::client {

ResidualStore::Layout* ResidualStore::Make(std::span<const ParamSpan> spans) {
  LayoutKey key;
  for (const ParamSpan& s : spans) key.emplace_back(s.key, s.elements);
  std::unique_ptr<Layout>& l = layouts_[key];
  if (l == nullptr) {
    l = std::make_unique<Layout>();
    l->spans.assign(spans.begin(), spans.end());
    size_t n = 0;
    for (const ParamSpan& s : spans) {
      l->offsets.push_back(n);
      n += s.elements;
    }
    l->slot.residual.assign(n, 0.0f);
  }
  return l.get();
}

absl::StatusOr<agent::BucketSlot*> ResidualStore::Gather(std::span<const ParamSpan> spans) {
  if (spans.empty()) return absl::InvalidArgumentError("a bucket with no parameter spans");
  std::set<uint64_t> seen;
  for (const ParamSpan& s : spans) {
    if (s.elements == 0) {
      return absl::InvalidArgumentError(absl::StrCat("span ", s.key, " has 0 elements"));
    }
    if (!seen.insert(s.key).second) {
      return absl::InvalidArgumentError(absl::StrCat("span ", s.key, " twice in one bucket"));
    }
    auto it = homes_.find(s.key);
    if (it != homes_.end() && it->second.elements != s.elements) {
      return absl::InvalidArgumentError(absl::StrCat("span ", s.key, " has ", s.elements,
                                                     " elements; it had ", it->second.elements));
    }
  }
  Layout* l = Make(spans);
  for (size_t i = 0; i < spans.size(); ++i) {
    Home& home = homes_[spans[i].key];
    if (home.layout == l) continue;
    float* to = l->slot.residual.data() + l->offsets[i];
    if (home.layout != nullptr) {
      // Move, not copy: the old layout's copy is zeroed so it is never
      // counted twice.
      float* from = home.layout->slot.residual.data() + home.offset;
      std::copy(from, from + home.elements, to);
      std::fill(from, from + home.elements, 0.0f);
      Layout* old = home.layout;
      if (--old->live == 0) {
        LayoutKey key;
        for (const ParamSpan& s : old->spans) key.emplace_back(s.key, s.elements);
        layouts_.erase(key);
      }
    } else {
      std::fill(to, to + spans[i].elements, 0.0f);
    }
    home = {l, l->offsets[i], spans[i].elements};
    ++l->live;
  }
  return &l->slot;
}

std::vector<const agent::BucketSlot*> ResidualStore::Touched(
    std::span<const ParamSpan> spans) const {
  std::vector<const agent::BucketSlot*> out;
  LayoutKey key;
  for (const ParamSpan& s : spans) key.emplace_back(s.key, s.elements);
  if (auto it = layouts_.find(key); it != layouts_.end()) out.push_back(&it->second->slot);
  for (const ParamSpan& s : spans) {
    if (auto it = homes_.find(s.key); it != homes_.end()) out.push_back(&it->second.layout->slot);
  }
  return out;
}

std::map<uint64_t, std::vector<float>> ResidualStore::Export() const {
  std::map<uint64_t, std::vector<float>> out;
  for (const auto& [key, home] : homes_) {
    const float* from = home.layout->slot.residual.data() + home.offset;
    out[key].assign(from, from + home.elements);
  }
  return out;
}

void ResidualStore::Import(std::map<uint64_t, std::vector<float>> residuals) {
  layouts_.clear();
  homes_.clear();
  for (auto& [key, values] : residuals) {
    if (values.empty()) continue;
    const ParamSpan span{key, values.size()};
    Layout* l = Make({&span, 1});
    l->slot.residual = std::move(values);
    l->live = 1;
    homes_[key] = {l, 0, span.elements};
  }
}

}  // namespace gradex::client
