// The result's arithmetic both paths share (bucket_result.h).
#include "pipeline/bucket_result.h"

namespace gradex::pipeline {

void ScaleForMean(std::span<float> values, bool mean, float world) {
  if (!mean) return;
  for (float& v : values) v /= world;
}

std::vector<uint32_t> AppliedIndices(std::span<const float> values) {
  std::vector<uint32_t> idx;
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] != 0.0f) idx.push_back(static_cast<uint32_t>(i));
  }
  return idx;
}

size_t CountApplied(std::span<const float> values) {
  size_t applied = 0;
  for (float v : values) applied += v != 0.0f;
  return applied;
}

void KeepApplied(std::vector<uint32_t>* idx, std::span<const float> val) {
  size_t applied = 0;
  for (size_t i = 0; i < val.size(); ++i) {
    if (val[i] != 0.0f) (*idx)[applied++] = (*idx)[i];
  }
  idx->resize(applied);
}

}  // namespace gradex::pipeline
