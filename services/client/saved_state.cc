#include "services/client/saved_state.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "catalog/fnv1a.h"

namespace gradex::client {
namespace {

constexpr char kMagic[8] = {'G', 'R', 'D', 'X', 'S', 'T', 'A', 'T'};

uint64_t Checksum(std::string_view bytes) {
  return catalog::Fnv1a(bytes, catalog::kFnv1aTruncatedBasis);
}

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("gradex state: ", what));
}

void PutMap(std::string* out, const std::map<uint64_t, std::vector<float>>& m) {
  Put(out, static_cast<uint64_t>(m.size()));
  for (const auto& [key, values] : m) {
    Put(out, key);
    Put(out, static_cast<uint64_t>(values.size()));
    out->append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  }
}

}  // namespace

std::string EncodeState(const SavedState& state) {
  std::string out(kMagic, sizeof(kMagic));
  Put(&out, kSavedStateVersion);
  Put(&out, state.step);
  PutMap(&out, state.residuals);
  PutMap(&out, state.velocities);
  Put(&out, Checksum(out));
  return out;
}

absl::StatusOr<SavedState> DecodeState(std::string_view blob) {
  constexpr size_t kHeader = sizeof(kMagic) + 4 + 8 + 8;
  if (blob.size() < kHeader + 8) return Bad(absl::StrCat(blob.size(), " bytes is too short"));
  if (std::memcmp(blob.data(), kMagic, sizeof(kMagic)) != 0) return Bad("not a gradex state");
  const std::string_view body = blob.substr(0, blob.size() - 8);
  uint64_t sum;
  std::memcpy(&sum, blob.data() + body.size(), 8);
  size_t at = sizeof(kMagic);
  auto get = [&](auto* v) {
    std::memcpy(v, body.data() + at, sizeof(*v));
    at += sizeof(*v);
  };
  uint32_t version;
  get(&version);
  if (version != 1 && version != kSavedStateVersion) {
    return Bad(absl::StrCat("version ", version, ", this build reads 1 and ", kSavedStateVersion));
  }
  if (sum != Checksum(body)) return Bad("checksum mismatch (truncated or corrupted)");
  SavedState s;
  get(&s.step);
  auto get_map = [&](const char* what, std::map<uint64_t, std::vector<float>>* m) -> absl::Status {
    if (body.size() - at < 8) return Bad(absl::StrCat(what, ": truncated"));
    uint64_t spans;
    get(&spans);
    // Every span takes at least 16 bytes: bound the count before the loop.
    if (spans > (body.size() - at) / 16) {
      return Bad(absl::StrCat(spans, " spans do not fit (", what, ")"));
    }
    for (uint64_t i = 0; i < spans; ++i) {
      if (body.size() - at < 16) return Bad(absl::StrCat(what, ": span ", i, " truncated"));
      uint64_t key, elements;
      get(&key);
      get(&elements);
      if (elements == 0 || elements > (body.size() - at) / sizeof(float)) {
        return Bad(absl::StrCat(what, ": span ", key, ": ", elements, " elements do not fit"));
      }
      std::vector<float> values(elements);
      std::memcpy(values.data(), body.data() + at, elements * sizeof(float));
      at += elements * sizeof(float);
      if (!m->emplace(key, std::move(values)).second) {
        return Bad(absl::StrCat(what, ": span ", key, " twice"));
      }
    }
    return absl::OkStatus();
  };
  if (absl::Status st = get_map("residuals", &s.residuals); !st.ok()) return st;
  if (version >= 2) {
    if (absl::Status st = get_map("velocities", &s.velocities); !st.ok()) return st;
    for (const auto& [key, u] : s.velocities) {
      auto it = s.residuals.find(key);
      if (it == s.residuals.end() || it->second.size() != u.size()) {
        return Bad(absl::StrCat("velocity of span ", key, " has no residual of its length"));
      }
    }
  }
  if (at != body.size()) return Bad(absl::StrCat(body.size() - at, " bytes after the last span"));
  return s;
}

}  // namespace gradex::client
