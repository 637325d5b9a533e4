// The bucket layouts, gradients and step driver the client tests share with
// the client rank they run as a separate process (client_rank_main.cc).
#ifndef GRADEX_TESTS_CLIENT_CLIENT_STEPS_H_
#define GRADEX_TESTS_CLIENT_CLIENT_STEPS_H_

#include <future>
#include <map>
#include <memory>
#include <vector>

#include "services/client/client.h"
#include "tests/collectives/harness.h"

namespace gradex::client {

inline const std::vector<size_t> kSpanSizes = {1000, 37, 500, 2048, 3, 800};
// DDP issues buckets in reverse parameter order; after the first iteration
// it rebuilds them in the order gradients became ready.
inline const std::vector<std::vector<uint64_t>> kFirstLayout = {{5, 4}, {3, 2}, {1, 0}};
inline const std::vector<std::vector<uint64_t>> kRebuilt = {{5}, {4, 3}, {2, 1, 0}};

// The options of every rank in these tests (the per-bucket rules, such as
// dense_probe_period, are agreed in-band: rank 0's win; the same on every
// rank here, so the tests' expectations hold on every rank's own options).
inline ClientOptions Options(int rank, int world) {
  ClientOptions o;
  o.job = "client-test";
  o.rank = rank;
  o.world_size = world;
  o.algorithm = "spardl";
  o.density = 0.05;
  o.min_compression_rate = 0;  // small buckets stay sparse: residuals to conserve
  o.dense_probe_period = 3;    // steps 2 and 5 time a dense exchange beside the sparse one
  o.mean = false;
  o.timeout = std::chrono::milliseconds(20000);
  return o;
}

// The gradient of span `key` on `rank` at `step`: small integers.
inline std::vector<float> Grad(uint64_t key, int rank, int step) {
  return gradex::testing::MakeGradient(100 + key, rank, step, kSpanSizes[key],
                                       gradex::testing::Values::kIntegers);
}

// One step on one client: every bucket of `layout` queued at once, the last
// one ending the step; returns each span's result and each bucket's status.
struct StepResult {
  std::map<uint64_t, std::vector<float>> spans;
  std::vector<absl::Status> statuses;
};

inline StepResult RunStep(Client& c, int rank, int step,
                          const std::vector<std::vector<uint64_t>>& layout,
                          Memory memory = Memory::kHost) {
  std::vector<std::vector<float>> data(layout.size());
  std::vector<std::future<absl::Status>> done;
  for (size_t b = 0; b < layout.size(); ++b) {
    std::vector<ParamSpan> spans;
    for (uint64_t key : layout[b]) {
      std::vector<float> g = Grad(key, rank, step);
      data[b].insert(data[b].end(), g.begin(), g.end());
      spans.push_back({key, kSpanSizes[key]});
    }
    auto p = std::make_shared<std::promise<absl::Status>>();
    done.push_back(p->get_future());
    c.AllreduceAsync(spans, data[b], memory, b + 1 == layout.size(),
                     [p](absl::Status s) { p->set_value(s); });
  }
  StepResult r;
  for (size_t b = 0; b < layout.size(); ++b) {
    r.statuses.push_back(done[b].get());
    size_t at = 0;
    for (uint64_t key : layout[b]) {
      r.spans[key].assign(data[b].begin() + at, data[b].begin() + at + kSpanSizes[key]);
      at += kSpanSizes[key];
    }
  }
  return r;
}

}  // namespace gradex::client

#endif  // GRADEX_TESTS_CLIENT_CLIENT_STEPS_H_
