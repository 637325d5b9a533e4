// A member that sends bad frames (an index out of its block, NaN values) is
// evicted and the others go on. Four agents over the real coordinator logic
// (in-process bridge, loopback data plane); from step kBadStep the last one
// corrupts every frame it sends. Every honest receiver refuses them, its
// step fails naming the bad frame, and its report blames the sender; the
// coordinator evicts that member and quarantines its agent id, and the
// three survivors run every later step at P = 3 with identical results.
// Before: the sender was re-admitted every epoch and never evicted, and
// after 5 failed steps every honest agent gave up.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/wire/frame.h"
#include "gtest/gtest.h"
#include "pipeline/bucket_pipeline.h"
#include "services/coordinator/job_config.h"
#include "tests/agent/coordinator_bridge.h"
#include "tests/agent/loopback_provider.h"
#include "tests/agent/pipeline_step.h"
#include "transport/forwarding_transport.h"

namespace gradex {
namespace {

enum class Corruption { kIndexOutOfBlock, kNaN };

// Rewrites the frames of every message it sends once armed: the first index
// of each sparse frame moved past its block (a dense frame's block start
// moved by one), or every value NaN. Headers stay well formed, so the
// receiver's sender check passes and its decoder is what refuses them.
class CorruptingTransport final : public transport::ForwardingTransport {
 public:
  CorruptingTransport(std::unique_ptr<transport::Transport> inner, const std::atomic<bool>* armed,
                      Corruption how)
      : transport::ForwardingTransport(std::move(inner)), armed_(armed), how_(how) {}

  absl::StatusOr<transport::RequestId> PostSend(int peer, uint64_t tag,
                                                transport::Bytes payload) override {
    if (armed_->load()) Corrupt(&payload);
    return transport::ForwardingTransport::PostSend(peer, tag, std::move(payload));
  }

 private:
  void Corrupt(transport::Bytes* m) const {
    size_t at = 0;
    while (m->size() - at >= sizeof(collectives::wire::FrameHeader)) {
      collectives::wire::FrameHeader h;
      std::memcpy(&h, m->data() + at, sizeof h);
      if (h.magic != collectives::wire::kFrameMagic ||
          (h.flags & collectives::wire::kFrameQuantized) != 0)
        return;
      const bool sparse = (h.flags & collectives::wire::kFrameSparse) != 0;
      const size_t payload = size_t{h.count} * (sparse ? 8 : 4);
      if (m->size() - at - sizeof h < payload) return;
      uint8_t* body = m->data() + at + sizeof h;
      float* values = reinterpret_cast<float*>(sparse ? body + 4 * size_t{h.count} : body);
      if (how_ == Corruption::kNaN) {
        for (uint32_t i = 0; i < h.count; ++i) {
          values[i] = std::numeric_limits<float>::quiet_NaN();
        }
      } else if (sparse && h.count > 0) {
        std::memcpy(body, &h.block_end, sizeof h.block_end);
      } else if (!sparse) {
        h.block_begin += 1;
        std::memcpy(m->data() + at, &h, sizeof h);
      }
      at += sizeof h + payload;
    }
  }

  const std::atomic<bool>* armed_;
  const Corruption how_;
};

class CorruptingProvider final : public member::ForwardingProvider {
 public:
  CorruptingProvider(testing::LoopbackPool* pool, const std::atomic<bool>* armed, Corruption how)
      : member::ForwardingProvider(std::make_unique<testing::LoopbackProvider>(pool, "addr-bad")),
        armed_(armed),
        how_(how) {}
  absl::StatusOr<std::unique_ptr<transport::Transport>> Connect(
      const member::Plan& plan, int rank, const member::ConnectHooks& hooks) override {
    absl::StatusOr<std::unique_ptr<transport::Transport>> t = inner().Connect(plan, rank, hooks);
    if (!t.ok()) return t.status();
    return std::make_unique<CorruptingTransport>(*std::move(t), armed_, how_);
  }

 private:
  const std::atomic<bool>* armed_;
  const Corruption how_;
};

constexpr int kWorld = 4, kSteps = 12, kBadStep = 3;
constexpr size_t kElements = 6000;

struct Run {
  std::vector<absl::Status> steps;
  std::vector<int> worlds;
  std::vector<std::vector<float>> results;  // per step, bucket 0's dense result
};

void RunJob(Corruption how) {
  absl::StatusOr<coordinator::JobSettings> s = coordinator::ParseJobConfig(
      R"({"job_id":"job","world_size":4,"min_world_size":3,"algorithm":"spardl","density":0.02,
          "lease_ms":500,"entry_timeout_ms":1500,"barrier_period":4,"step_deadline_ms":5000})");
  ASSERT_TRUE(s.ok()) << s.status();
  testing::CoordinatorHub hub(*s);
  testing::LoopbackPool pool;
  std::atomic<bool> armed{false};
  CorruptingProvider bad_provider(&pool, &armed, how);
  std::vector<testing::BridgedAgent> agents(kWorld);
  std::vector<std::unique_ptr<pipeline::BucketPipeline>> pipelines(kWorld);
  for (int i = 0; i < kWorld; ++i) {
    agents[i] = testing::MakeBridgedAgent(hub, pool, i);
    if (i == kWorld - 1) {
      // The bad member gives up on re-joining within 3 s (it is quarantined).
      pipeline::AgentOptions o = testing::TestAgentOptions(absl::StrCat("a", i));
      o.join_timeout = std::chrono::milliseconds(3000);
      agents[i].agent =
          std::make_unique<pipeline::Agent>(o, agents[i].control.get(), &bad_provider, nullptr);
    }
    pipelines[i] = testing::SequentialPipeline(agents[i].agent.get());
  }
  std::vector<Run> runs(kWorld);
  std::vector<std::thread> threads;
  for (int i = 0; i < kWorld; ++i) {
    threads.emplace_back([&, i] {
      ASSERT_TRUE(agents[i].agent->Start().ok());
      for (int step = 0; step < kSteps; ++step) {
        if (i == kWorld - 1 && step == kBadStep) armed.store(true);
        std::vector<float> g(kElements);
        for (size_t j = 0; j < kElements; ++j) g[j] = static_cast<float>((j * 7 + step + i) % 13);
        testing::PipelineStep r = testing::RunPipelineStep(*pipelines[i], {g});
        Run& run = runs[i];
        run.steps.push_back(r.end);
        run.worlds.push_back(r.out.world);
        std::vector<float> dense(kElements, 0.0f);
        if (r.end.ok()) r.buckets[0].outcome.result.ToDense(dense);
        run.results.push_back(std::move(dense));
        if (i == kWorld - 1 && !r.end.ok() && step > kBadStep) return;  // not re-admitted
      }
    });
  }
  for (auto& t : threads) t.join();

  int named = 0;
  for (int i = 0; i < kWorld - 1; ++i) {
    const Run& r = runs[i];
    ASSERT_EQ(r.steps.size(), static_cast<size_t>(kSteps)) << "agent " << i;
    for (int step = 0; step < kBadStep; ++step) {
      EXPECT_TRUE(r.steps[step].ok()) << "agent " << i << " step " << step << ": " << r.steps[step];
    }
    // The bad step fails on every honest agent: on those that received a
    // bad frame, naming it; the others fail fast as their peers abort.
    EXPECT_FALSE(r.steps[kBadStep].ok());
    named += r.steps[kBadStep].message().find("bad frame") != std::string::npos;
    // Every later step but the re-entry runs at P = 3 (at most one more
    // fails while the survivors' new epoch forms).
    int failed_after = 0;
    for (int step = kBadStep + 1; step < kSteps; ++step) failed_after += !r.steps[step].ok();
    EXPECT_LE(failed_after, 1) << "agent " << i;
    for (int step = kSteps - 4; step < kSteps; ++step) {
      ASSERT_TRUE(r.steps[step].ok()) << "agent " << i << " step " << step << ": " << r.steps[step];
      EXPECT_EQ(r.worlds[step], kWorld - 1) << "agent " << i << " step " << step;
      EXPECT_EQ(r.results[step], runs[0].results[step]) << "agent " << i << " step " << step;
    }
  }
  EXPECT_GE(named, 1) << "no honest agent named the refused frame";
  // The bad member was not re-admitted: its steps after the bad one failed.
  const Run& bad = runs[kWorld - 1];
  ASSERT_GT(bad.steps.size(), static_cast<size_t>(kBadStep + 1));
  EXPECT_FALSE(bad.steps.back().ok());
}

TEST(HostileBadFrames, AnIndexOutOfItsBlockEvictsTheSenderAndTheOthersGoOn) {
  RunJob(Corruption::kIndexOutOfBlock);
}

TEST(HostileBadFrames, NaNValuesEvictTheSenderAndTheOthersGoOn) { RunJob(Corruption::kNaN); }

}  // namespace
}  // namespace gradex
