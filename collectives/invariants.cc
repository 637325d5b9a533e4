#include "collectives/invariants.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "catalog/catalog.h"
#include "catalog/fnv1a.h"

namespace gradex::collectives {

uint64_t HashFloats(std::span<const float> x) {
  // FNV-1a over 32-bit words, finished with a mixer: fast enough for 25M floats.
  uint64_t h = catalog::kFnv1aOffsetBasis;
  for (float f : x) {
    uint32_t b;
    std::memcpy(&b, &f, sizeof b);
    h = catalog::Fnv1aMix(h, b);
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h ^ x.size();
}

absl::StatusOr<ConservationResult> CheckConservation(
    const CallContext& ctx, std::span<const float> grad, std::span<const float> residual_in,
    std::span<const float> residual_out, std::span<const float> result_dense,
    std::span<float> contribution, std::span<float> scratch, std::span<const float> decayed) {
  const size_t n = grad.size();
  if (!decayed.empty() && decayed.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("decayed has ", decayed.size(), " elements, the gradient ", n));
  }
  double max_abs_term = 0;
  for (size_t i = 0; i < n; ++i) {
    double term = std::fabs(double(grad[i])) + std::fabs(double(residual_in[i])) +
                  std::fabs(double(residual_out[i]));
    contribution[i] = grad[i] + residual_in[i] - residual_out[i];
    if (!decayed.empty()) {
      contribution[i] -= decayed[i];
      term += std::fabs(double(decayed[i]));
    }
    if (term > max_abs_term) max_abs_term = term;  // a NaN term leaves it: the error catches NaN
  }
  // The catalog's reference sum (dense, exact on integers, no options).
  const std::string_view reference = catalog::ReferenceSumAlgorithm();
  auto ring = CreateAllreduce(reference);
  if (!ring.ok()) return ring.status();
  std::fill(scratch.begin(), scratch.end(), 0.0f);  // a dense algorithm's residual: none
  AllreduceOptions opts;
  opts.density = 1.0;
  opts.teams = 1;
  AllreduceResult sum;
  CallStats stats;
  absl::Status s = (*ring)->Run(ctx, opts, contribution, scratch, &sum, &stats);
  if (!s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("conservation check (", std::string(reference), "): ", s.message()));
  }
  sum.ToDense(scratch);
  ConservationResult r;
  r.max_abs_term = max_abs_term;
  for (size_t i = 0; i < n; ++i) {
    // std::max drops a NaN (max(err, NaN) is err), so a NaN result would
    // pass as conserved: a non-finite value is an infinite error.
    const double err = std::fabs(double(scratch[i]) - double(result_dense[i]));
    r.max_abs_err =
        std::isfinite(err) ? std::max(r.max_abs_err, err) : std::numeric_limits<double>::infinity();
    r.max_abs_sum = std::max(r.max_abs_sum, std::fabs(double(scratch[i])));
  }
  return r;
}

absl::StatusOr<bool> CheckConsistency(InBand& in_band, uint64_t hash,
                                      transport::Deadline deadline) {
  auto all = in_band.AllGather(hash, deadline);
  if (!all.ok()) return all.status();
  for (uint64_t h : *all) {
    if (h != hash) return false;
  }
  return true;
}

}  // namespace gradex::collectives
