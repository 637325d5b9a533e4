// A schedule for algorithms that tests add to the catalog themselves
// (added_algorithm_test.cc, tests/agent/params_test.cc): every rank sends its
// gradient + residual to every other rank and sums the P vectors in rank
// order, so every rank holds the same bits. Subclasses give the name (their
// catalog entry's) and may hook CheckOptions.
#ifndef GRADEX_TESTS_COLLECTIVES_TEST_DENSE_GATHER_H_
#define GRADEX_TESTS_COLLECTIVES_TEST_DENSE_GATHER_H_

#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "collectives/algorithms/dense_allreduce.h"
#include "collectives/link.h"
#include "collectives/phase_timer.h"

namespace gradex::testing {

class TestDenseGather : public collectives::algorithms::DenseAllreduce {
 public:
  explicit TestDenseGather(std::string_view name) : name_(name) {}
  std::string_view name() const override { return name_; }
  absl::StatusOr<collectives::Volume> ModelVolume(int, int world, size_t n,
                                                  const collectives::AllreduceOptions&,
                                                  const collectives::CallStats&) const override {
    const uint64_t frame = sizeof(collectives::wire::FrameHeader) + 4 * uint64_t{n};
    const uint64_t peers = world - 1;
    return collectives::Volume{peers * frame, peers * frame, peers};
  }

 protected:
  absl::Status ReduceDense(const collectives::CallContext& ctx, float* data, size_t n,
                           collectives::PhaseTimes* times) override {
    const int p = ctx.transport->size(), r = ctx.transport->rank();
    collectives::Link link(ctx, id(), times);
    const collectives::wire::BlockRange whole{0, static_cast<uint32_t>(n)};
    std::vector<std::vector<float>> from(p, std::vector<float>(n, 0.0f));
    std::memcpy(from[r].data(), data, n * sizeof(float));
    for (int d = 1; d < p; ++d) {
      transport::Bytes out;
      collectives::wire::AppendDenseFrame(link.meta(1), whole, data, &out);
      const int src = (r - d + p) % p;
      absl::StatusOr<transport::Bytes> in = link.Exchange((r + d) % p, std::move(out), src, 1, d);
      if (!in.ok()) return in.status();
      absl::Status st =
          collectives::wire::DecodeDenseBlock(*in, link.meta(1), whole, false, from[src].data());
      if (!st.ok()) return st;
    }
    collectives::PhaseTimer t(&times->reduction_s);
    for (size_t i = 0; i < n; ++i) {
      float s = 0.0f;
      for (int q = 0; q < p; ++q) s += from[q][i];
      data[i] = s;
    }
    return absl::OkStatus();
  }

 private:
  std::string_view name_;
};

}  // namespace gradex::testing

#endif  // GRADEX_TESTS_COLLECTIVES_TEST_DENSE_GATHER_H_
