#include "pipeline/span_store.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"

namespace gradex::pipeline {

SpanStore::Layout* SpanStore::Make(std::span<const ParamSpan> spans) {
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
    l->slot.velocity.assign(n, 0.0f);
    l->slot.velocity_live.assign(spans.size(), 0);
  }
  return l.get();
}

absl::StatusOr<BucketSlot*> SpanStore::Gather(std::span<const ParamSpan> spans) {
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
    const size_t to = l->offsets[i], n = spans[i].elements;
    if (home.layout != nullptr) {
      // Move, not copy: the old layout's copy is zeroed so it is never
      // counted twice.
      BucketSlot& from = home.layout->slot;
      auto move = [&](std::vector<float>& src, std::vector<float>& dst) {
        std::copy(src.begin() + home.offset, src.begin() + home.offset + n, dst.begin() + to);
        std::fill(src.begin() + home.offset, src.begin() + home.offset + n, 0.0f);
      };
      move(from.residual, l->slot.residual);
      move(from.velocity, l->slot.velocity);
      l->slot.velocity_live[i] = from.velocity_live[home.index];
      from.velocity_live[home.index] = 0;
      Layout* old = home.layout;
      if (--old->live == 0) {
        LayoutKey key;
        for (const ParamSpan& s : old->spans) key.emplace_back(s.key, s.elements);
        layouts_.erase(key);
      }
    } else {
      std::fill(l->slot.residual.begin() + to, l->slot.residual.begin() + to + n, 0.0f);
      std::fill(l->slot.velocity.begin() + to, l->slot.velocity.begin() + to + n, 0.0f);
      l->slot.velocity_live[i] = 0;
    }
    home = {l, to, n, i};
    ++l->live;
  }
  return &l->slot;
}

std::vector<const BucketSlot*> SpanStore::Touched(std::span<const ParamSpan> spans) const {
  std::vector<const BucketSlot*> out;
  LayoutKey key;
  for (const ParamSpan& s : spans) key.emplace_back(s.key, s.elements);
  if (auto it = layouts_.find(key); it != layouts_.end()) out.push_back(&it->second->slot);
  for (const ParamSpan& s : spans) {
    if (auto it = homes_.find(s.key); it != homes_.end()) out.push_back(&it->second.layout->slot);
  }
  return out;
}

std::vector<BucketSlot*> SpanStore::Moves(std::span<const ParamSpan> spans) {
  LayoutKey key;
  for (const ParamSpan& s : spans) key.emplace_back(s.key, s.elements);
  auto own = layouts_.find(key);
  std::vector<BucketSlot*> out;
  for (const ParamSpan& s : spans) {
    auto it = homes_.find(s.key);
    if (it == homes_.end()) continue;  // a new span: zeros, nothing moves
    if (own != layouts_.end() && it->second.layout == own->second.get()) continue;
    out.push_back(&it->second.layout->slot);
  }
  if (!out.empty() && own != layouts_.end()) out.push_back(&own->second->slot);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<BucketSlot*> SpanStore::Slots() {
  std::vector<BucketSlot*> out;
  for (auto& [key, layout] : layouts_) out.push_back(&layout->slot);
  return out;
}

SpanState SpanStore::Export() const {
  SpanState out;
  for (const auto& [key, home] : homes_) {
    const BucketSlot& slot = home.layout->slot;
    out.residuals[key].assign(slot.residual.begin() + home.offset,
                              slot.residual.begin() + home.offset + home.elements);
    if (slot.velocity_live[home.index]) {
      out.velocities[key].assign(slot.velocity.begin() + home.offset,
                                 slot.velocity.begin() + home.offset + home.elements);
    }
  }
  return out;
}

absl::Status SpanStore::Import(SpanState state) {
  for (const auto& [key, u] : state.velocities) {
    auto it = state.residuals.find(key);
    if (it == state.residuals.end() || it->second.size() != u.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("span ", key, ": a velocity of ", u.size(), " elements and a residual of ",
                       it == state.residuals.end() ? 0 : it->second.size()));
    }
  }
  layouts_.clear();
  homes_.clear();
  for (auto& [key, values] : state.residuals) {
    if (values.empty()) continue;
    const ParamSpan span{key, values.size()};
    Layout* l = Make({&span, 1});
    l->slot.residual = std::move(values);
    if (auto it = state.velocities.find(key); it != state.velocities.end()) {
      l->slot.velocity = std::move(it->second);
      l->slot.velocity_live[0] = 1;
    }
    l->live = 1;
    homes_[key] = {l, 0, span.elements, 0};
  }
  return absl::OkStatus();
}

}  // namespace gradex::pipeline
