// covap: COVAP's coarse-grained filter (the covap seed; constants in
// docs/design.md). The step's buckets are cut into parts, counted across the
// buckets in order; part i is sent whole, by a dense ring allreduce, when
// (i + step) % I == 0, and every other part stays in the residual. The
// residual enters each call scaled by the seed's error-feedback coefficient
// (the frame applies ResidualCoefficient and reports the decayed rest).
//
// Parts are strided (part j of a bucket cut in p: elements j, j+p, j+2p, ...)
// as docs/design.md has them, rather than the contiguous slices the seed's
// text suggests ("evenly slices"): a bucket holds whole layers one after the
// other, so a contiguous slice would refresh one layer now and its neighbour
// only steps later, while a strided part samples every layer of the bucket
// each time it is sent, so no layer goes I steps without an update.
//
// Nothing is selected by value, so the schedule is the same on every rank
// (it depends on the step, I and the bucket sizes only) and the sum of the
// sent part is a dense allreduce: bitwise consistent, exact on integers.

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/algorithms/covap/covap_schedule.h"
#include "collectives/algorithms/ring_allreduce.h"
#include "collectives/link.h"
#include "collectives/phase_timer.h"
#include "collectives/sparse_allreduce.h"

namespace gradex::collectives::algorithms::covap {
namespace {

constexpr std::string_view kInterval = "covap_interval";

class Covap final : public SparseAllreduce {
 public:
  std::string_view name() const override { return "covap"; }

  // A dense ring allreduce of the sent part's elements (0 when none is sent).
  absl::StatusOr<Volume> ModelVolume(int rank, int world, size_t n, const AllreduceOptions&,
                                     const CallStats& observed) const override {
    const double m = observed.Detail("sent_elements");
    if (!(m >= 0 && m <= static_cast<double>(n))) {
      return absl::InvalidArgumentError(absl::StrCat("sent_elements ", m, " not in [0, ", n, "]"));
    }
    if (m == 0) return Volume{};
    return RingAllreduceVolume(rank, world, static_cast<size_t>(m));
  }

 protected:
  absl::Status CheckOptions(const CallContext& ctx,
                            const AllreduceOptions& options) const override {
    // The catalog bounds the parameter where it is set (job config, plan,
    // agent); a call made directly is checked here too.
    const catalog::AlgorithmSpec* spec = catalog::Find(name());
    const catalog::ParamSpec* p = spec ? catalog::FindParam(*spec, kInterval) : nullptr;
    if (p != nullptr && options.params.contains(kInterval)) {
      if (absl::Status s = catalog::CheckParam(*p, options.params.find(kInterval)->second);
          !s.ok()) {
        return s;
      }
    }
    if (!ctx.step_buckets.empty() && ctx.bucket_index >= ctx.step_buckets.size()) {
      return absl::InvalidArgumentError(absl::StrCat("bucket index ", ctx.bucket_index,
                                                     " of a step of ", ctx.step_buckets.size(),
                                                     " buckets"));
    }
    return absl::OkStatus();
  }

  float ResidualCoefficient(const CallContext& ctx,
                            const AllreduceOptions& options) const override {
    return covap::Coefficient(ctx.training_step, Interval(options));
  }

  absl::Status Exchange(const CallContext& ctx, const AllreduceOptions& options,
                        std::span<float> acc, ResidualLedger&, AllreduceResult* result,
                        CallStats* stats) override {
    const size_t n = acc.size();
    const int interval = Interval(options);
    // Without the step's bucket sizes this bucket is the step's only one.
    const size_t alone[1] = {n};
    std::span<const size_t> buckets = ctx.step_buckets;
    uint32_t bucket = ctx.bucket_index;
    if (buckets.empty()) buckets = alone, bucket = 0;
    if (buckets[bucket] != n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bucket ", bucket, " has ", n, " elements, the step's sizes say ", buckets[bucket]));
    }
    const covap::BucketParts parts = covap::PartsOf(buckets, bucket, interval);
    const int j = covap::SentPart(parts, ctx.training_step, interval);
    const size_t m = j < 0 ? 0 : covap::PartElements(n, parts.count, j);
    stats->details["parts"] = parts.count;
    stats->details["sent_part"] = j;
    stats->details["sent_elements"] = static_cast<double>(m);
    stats->details["interval"] = interval;
    stats->result_capacity = m;
    // The whole bucket gives a dense result, as dense-ring's; a strided part
    // a sparse one. The part is reduced in the result's own buffer (the
    // caller's, reused across calls).
    const bool whole = parts.count == 1;
    result->is_dense = whole && m > 0;
    if (!result->is_dense) result->dense.clear();
    if (whole) result->sparse.clear();
    if (m == 0) {
      result->sparse.clear();
      stats->result_nnz = 0;
      return absl::OkStatus();  // every rank skips alike: the schedule is shared
    }
    std::vector<float>& part = whole ? result->dense : result->sparse.val;
    const size_t stride = static_cast<size_t>(parts.count);
    {
      PhaseTimer t(&stats->phases.selection_s);
      part.resize(m);
      for (size_t e = 0; e < m; ++e) part[e] = acc[j + e * stride];
    }
    Link link(ctx, id(), &stats->phases);
    if (absl::Status s = RingAllreduce(link, part.data(), m, &stats->phases); !s.ok()) {
      return s;  // acc untouched: the frame restores grad + old residual
    }
    PhaseTimer t(&stats->phases.reduction_s);
    if (whole) {
      std::fill(acc.begin(), acc.end(), 0.0f);
    } else {
      result->sparse.idx.resize(m);
      for (size_t e = 0; e < m; ++e) {
        result->sparse.idx[e] = static_cast<uint32_t>(j + e * stride);
        acc[j + e * stride] = 0.0f;  // sent whole: nothing of it stays behind
      }
    }
    stats->result_nnz = result->CountNonZeros();
    return absl::OkStatus();
  }

 private:
  int Interval(const AllreduceOptions& options) const {
    return static_cast<int>(Param(options, kInterval));
  }
};

}  // namespace

GRADEX_REGISTER_ALGORITHM("covap", [] { return std::make_unique<Covap>(); });

}  // namespace gradex::collectives::algorithms::covap
