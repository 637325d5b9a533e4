// COVAP (collectives/algorithms/covap/covap.cc, covap_schedule.h): the schedule against the
// seed's rules (docs/design.md's constants), and the algorithm over a step of
// several buckets, where its parts are cut and sent in turn: every element is
// sent once in I steps, results are consistent, the sent part is the exact
// sum of every rank's grad + c * residual, conservation holds with the
// decayed term, and the bytes are the ring's model of the sent part.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "collectives/algorithms/covap/covap_schedule.h"
#include "collectives/algorithms/ring_allreduce.h"
#include "gtest/gtest.h"
#include "tests/collectives/harness.h"

namespace gradex::testing {
namespace {

using collectives::algorithms::covap::BucketParts;

TEST(CovapSchedule, PartCountsFollowTheSeedsFormula) {
  // VGG-19's buckets (the seed's Table V). Median of six: (7079424 +
  // 7669760) / 2 = 7374592; min(int(s/median - 0.3) + 1, I).
  const std::vector<size_t> vgg = {4101096, 16781312, 107480576, 7079424, 7669760, 555072};
  EXPECT_EQ(collectives::algorithms::covap::MedianSize(vgg), 7374592.0);
  const std::vector<int> want32 = {1, 2, 15, 1, 1, 1}, want4 = {1, 2, 4, 1, 1, 1};
  for (size_t b = 0; b < vgg.size(); ++b) {
    EXPECT_EQ(collectives::algorithms::covap::PartCount(vgg[b], 7374592.0, 32), want32[b]) << b;
    EXPECT_EQ(collectives::algorithms::covap::PartCount(vgg[b], 7374592.0, 4), want4[b]) << b;
    EXPECT_EQ(collectives::algorithms::covap::PartCount(vgg[b], 7374592.0, 1), 1)
        << b;  // I = 1: nothing is cut
  }
  // With the median the seed states (5590260) its example's 3 and 19 parts.
  EXPECT_EQ(collectives::algorithms::covap::PartCount(16781312, 5590260, 32), 3);
  EXPECT_EQ(collectives::algorithms::covap::PartCount(107480576, 5590260, 32), 19);
  EXPECT_EQ(collectives::algorithms::covap::PartCount(107480576, 5590260, 8), 8);
  // Odd count: the middle size; 250/129 - 0.3 = 1.64 -> 2; 1000/129 -> 8.
  const std::vector<size_t> odd = {100, 100, 250, 1000, 129};
  EXPECT_EQ(collectives::algorithms::covap::MedianSize(odd), 129.0);
  EXPECT_EQ(collectives::algorithms::covap::PartCount(250, 129, 16), 2);
  EXPECT_EQ(collectives::algorithms::covap::PartCount(1000, 129, 16), 8);
  EXPECT_EQ(collectives::algorithms::covap::PartCount(1000, 129, 3), 3);
  EXPECT_EQ(collectives::algorithms::covap::PartCount(100, 129, 16), 1);
  // The 0.3 margin: 1.2 and 1.4 times the median.
  EXPECT_EQ(collectives::algorithms::covap::PartCount(12, 10, 5), 1);
  EXPECT_EQ(collectives::algorithms::covap::PartCount(14, 10, 5), 2);
  EXPECT_EQ(collectives::algorithms::covap::PartCount(0, 0, 5), 1);  // empty step: no cut
  // Parts are counted across buckets in order.
  const BucketParts third = collectives::algorithms::covap::PartsOf(vgg, 2, 4);
  EXPECT_EQ(third.first, 1u + 2u);
  EXPECT_EQ(third.count, 4);
  EXPECT_EQ(collectives::algorithms::covap::PartsOf(vgg, 5, 4).first, 1u + 2 + 4 + 1 + 1);
}

TEST(CovapSchedule, EveryPartOfEveryBucketOnceInIConsecutiveSteps) {
  const std::vector<std::vector<size_t>> steps = {
      {4101096, 16781312, 107480576, 7079424, 7669760, 555072},
      {1000, 3000, 500, 9000, 40},
      {7},
      {5, 5, 5, 5},
      {0, 10, 100, 1000, 10000, 3}};
  for (const auto& buckets : steps) {
    for (int interval : {1, 2, 3, 4, 5, 9, 16}) {
      for (uint64_t start : {uint64_t{0}, uint64_t{7}, uint64_t{1000003}}) {
        SCOPED_TRACE("I=" + std::to_string(interval) + " start=" + std::to_string(start));
        std::map<std::pair<size_t, int>, int> sent;  // (bucket, part) -> times
        size_t total_parts = 0;
        for (size_t b = 0; b < buckets.size(); ++b) {
          const BucketParts parts = collectives::algorithms::covap::PartsOf(buckets, b, interval);
          ASSERT_GE(parts.count, 1);
          ASSERT_LE(parts.count, interval);
          total_parts += parts.count;
          // The strided parts cover the bucket exactly.
          size_t elements = 0;
          for (int j = 0; j < parts.count; ++j) {
            elements += collectives::algorithms::covap::PartElements(buckets[b], parts.count, j);
          }
          EXPECT_EQ(elements, buckets[b]);
          for (uint64_t s = start; s < start + interval; ++s) {
            const int j = collectives::algorithms::covap::SentPart(parts, s, interval);
            if (j < 0) continue;
            EXPECT_TRUE(collectives::algorithms::covap::PartSent(parts.first + j, s, interval));
            ++sent[{b, j}];
          }
        }
        EXPECT_EQ(sent.size(), total_parts);
        for (const auto& [part, times] : sent)
          EXPECT_EQ(times, 1) << part.first << "/" << part.second;
      }
    }
  }
}

TEST(CovapSchedule, ErrorFeedbackCoefficient) {
  // 0.5 + 0.1 * min(floor(step / 50), 5) for I <= 8.
  EXPECT_EQ(collectives::algorithms::covap::Coefficient(0, 3), 0.5f);
  EXPECT_EQ(collectives::algorithms::covap::Coefficient(49, 3), 0.5f);
  EXPECT_EQ(collectives::algorithms::covap::Coefficient(50, 3), 0.6f);
  EXPECT_EQ(collectives::algorithms::covap::Coefficient(249, 8), 0.9f);
  EXPECT_EQ(collectives::algorithms::covap::Coefficient(250, 3), 1.0f);
  EXPECT_EQ(collectives::algorithms::covap::Coefficient(300, 3), 1.0f);
  EXPECT_EQ(collectives::algorithms::covap::Coefficient(1u << 30, 1), 1.0f);
  // I > 8: 0.2, then 0.1 more every 100 steps.
  EXPECT_EQ(collectives::algorithms::covap::Coefficient(0, 9), 0.2f);
  EXPECT_EQ(collectives::algorithms::covap::Coefficient(99, 9), 0.2f);
  EXPECT_EQ(collectives::algorithms::covap::Coefficient(100, 9), 0.3f);
  EXPECT_EQ(collectives::algorithms::covap::Coefficient(300, 16), 0.5f);
  EXPECT_EQ(collectives::algorithms::covap::Coefficient(800, 9), 1.0f);
  EXPECT_EQ(collectives::algorithms::covap::Coefficient(5000, 9), 1.0f);
}

// One rank's view of one bucket's call.
struct BucketCall {
  std::vector<float> grad, residual_in, residual_out, result, decayed;
  collectives::CallStats stats;
  absl::Status status;
};

// Runs `steps` training steps of `buckets` on `world` loopback ranks, every
// bucket a call with the step's sizes. [step][bucket][rank].
std::vector<std::vector<std::vector<BucketCall>>> RunSteps(int world,
                                                           const std::vector<size_t>& buckets,
                                                           int interval, int steps, Values kind,
                                                           uint64_t first_step = 0) {
  std::vector<std::vector<std::vector<BucketCall>>> out(
      steps, std::vector<std::vector<BucketCall>>(buckets.size(), std::vector<BucketCall>(world)));
  collectives::AllreduceOptions options;
  options.params["covap_interval"] = interval;
  RunRanks(world, [&](int rank, transport::Transport& t) -> absl::Status {
    auto algo = collectives::CreateAllreduce("covap");
    if (!algo.ok()) return algo.status();
    std::vector<std::vector<float>> residual(buckets.size());
    for (size_t b = 0; b < buckets.size(); ++b) residual[b].assign(buckets[b], 0.0f);
    for (int s = 0; s < steps; ++s) {
      for (size_t b = 0; b < buckets.size(); ++b) {
        BucketCall& c = out[s][b][rank];
        c.grad = MakeGradient(5 + b, rank, s, buckets[b], kind);
        c.residual_in = residual[b];
        collectives::CallContext ctx{&t,
                                     42,
                                     1,
                                     s * buckets.size() + b,
                                     transport::DeadlineIn(std::chrono::seconds(20)),
                                     first_step + s};
        ctx.bucket_index = static_cast<uint32_t>(b);
        ctx.step_buckets = buckets;
        collectives::AllreduceResult result;
        c.status = RunOrAbort(**algo, ctx, options, c.grad, residual[b], &result, &c.stats);
        if (!c.status.ok()) return c.status;
        c.residual_out = residual[b];
        c.result.assign(buckets[b], 0.0f);
        result.ToDense(c.result);
        c.decayed = result.decayed;
      }
    }
    return absl::OkStatus();
  });
  return out;
}

TEST(Covap, StepOfBucketsSendsEveryElementOnceInIStepsExactly) {
  const std::vector<size_t> buckets = {1000, 3000, 500, 9000, 40, 0};
  for (int world : {1, 3, 4}) {
    for (int interval : {1, 3, 4}) {
      SCOPED_TRACE("P=" + std::to_string(world) + " I=" + std::to_string(interval));
      const int steps = 2 * interval;
      auto run = RunSteps(world, buckets, interval, steps, Values::kIntegers);
      std::vector<std::vector<int>> times(buckets.size());
      for (size_t b = 0; b < buckets.size(); ++b) times[b].assign(buckets[b], 0);
      for (int s = 0; s < steps; ++s) {
        const float c = collectives::algorithms::covap::Coefficient(s, interval);
        for (size_t b = 0; b < buckets.size(); ++b) {
          SCOPED_TRACE("step " + std::to_string(s) + " bucket " + std::to_string(b));
          const auto& calls = run[s][b];
          for (const BucketCall& r : calls) ASSERT_TRUE(r.status.ok()) << r.status;
          const BucketParts parts =
              collectives::algorithms::covap::PartsOf(buckets, static_cast<uint32_t>(b), interval);
          const int j = collectives::algorithms::covap::SentPart(parts, s, interval);
          const size_t m =
              j < 0 ? 0 : collectives::algorithms::covap::PartElements(buckets[b], parts.count, j);
          for (size_t i = 0; i < buckets[b]; ++i) {
            const bool sent = j >= 0 && static_cast<int>(i % parts.count) == j;
            if (sent && s < interval) ++times[b][i];
            // The sent sum, exactly (integers, c = 0.5 at these steps); the
            // same bits on every rank; conservation with the decayed term.
            double want = 0, in = 0, out = calls[0].result[i];
            for (const BucketCall& r : calls) {
              want += double{r.grad[i]} + double{c * r.residual_in[i]};
              in += double{r.grad[i]} + r.residual_in[i];
              out += double{r.residual_out[i]} + (r.decayed.empty() ? 0.0 : r.decayed[i]);
              ASSERT_EQ(r.result[i], calls[0].result[i]);
              // A sent element leaves nothing behind; an unsent one keeps grad + c * old.
              ASSERT_EQ(r.residual_out[i], sent ? 0.0f : r.grad[i] + c * r.residual_in[i]);
            }
            ASSERT_EQ(in, out) << i;
            ASSERT_EQ(calls[0].result[i], sent ? static_cast<float>(want) : 0.0f) << i;
          }
          for (int rank = 0; rank < world; ++rank) {
            const collectives::CallStats& st = calls[rank].stats;
            EXPECT_EQ(st.result_capacity, m);
            EXPECT_LE(st.result_nnz, m);
            EXPECT_EQ(st.Detail("sent_elements"), static_cast<double>(m));
            // Volume: a dense ring over the m sent elements, nothing else.
            const collectives::Volume v =
                m == 0 ? collectives::Volume{}
                       : collectives::algorithms::RingAllreduceVolume(rank, world, m);
            EXPECT_EQ(st.sent_bytes, v.sent_bytes);
            EXPECT_EQ(st.recv_bytes, v.recv_bytes);
          }
        }
      }
      // The first I steps sent every element of every bucket exactly once.
      for (size_t b = 0; b < buckets.size(); ++b) {
        for (size_t i = 0; i < buckets[b]; ++i) ASSERT_EQ(times[b][i], 1) << b << "/" << i;
      }
    }
  }
}

// Past step 50 the coefficient (0.6 .. 1) is no longer dyadic: conservation
// with the decayed term holds within float rounding; from step 250 it is 1
// again and nothing decays.
TEST(Covap, ConservationAcrossTheCoefficientSchedule) {
  const std::vector<size_t> buckets = {700, 2100, 64};
  auto run = RunSteps(3, buckets, 3, 4, Values::kGrid, /*first_step=*/48);
  auto late = RunSteps(3, buckets, 3, 3, Values::kGrid, /*first_step=*/250);
  for (auto* r : {&run, &late}) {
    for (const auto& step : *r) {
      for (const auto& calls : step) {
        std::vector<RankCall> as_rank;
        for (const BucketCall& c : calls) {
          ASSERT_TRUE(c.status.ok()) << c.status;
          as_rank.push_back({c.grad, c.residual_in, c.residual_out, c.result, c.decayed});
        }
        EXPECT_TRUE(Consistent(as_rank));
        EXPECT_LE(ConservationError(as_rank, true), 1e-6);
      }
    }
  }
  EXPECT_EQ(run[2][0][0].stats.Detail("ef_coefficient"), 0.6f);  // step 50
  for (const BucketCall& c : late[1][1]) EXPECT_TRUE(c.decayed.empty());
}

TEST(Covap, BadBucketsAreRefusedAndTheResidualKept) {
  auto results = RunRanks(2, [](int rank, transport::Transport& t) -> absl::Status {
    auto algo = collectives::CreateAllreduce("covap");
    if (!algo.ok()) return algo.status();
    const std::vector<size_t> sizes = {10, 20};
    std::vector<float> grad(10, 1.0f), residual(10, 2.0f);
    collectives::AllreduceResult result;
    collectives::CallStats stats;
    collectives::CallContext ctx{&t, 42, 1, 0, transport::DeadlineIn(std::chrono::seconds(5)), 0};
    ctx.step_buckets = sizes;
    ctx.bucket_index = 1;  // says 20 elements: this bucket has 10
    absl::Status s = (*algo)->Run(ctx, {}, grad, residual, &result, &stats);
    if (s.code() != absl::StatusCode::kInvalidArgument) return absl::InternalError("size");
    for (float v : residual) {
      if (v != 3.0f) return absl::InternalError("residual not grad + old residual");
    }
    ctx.bucket_index = 2;  // no such bucket
    s = (*algo)->Run(ctx, {}, grad, residual, &result, &stats);
    if (s.code() != absl::StatusCode::kInvalidArgument) return absl::InternalError("index");
    collectives::AllreduceOptions zero;
    zero.params["covap_interval"] = 0;
    ctx.bucket_index = 0;
    s = (*algo)->Run(ctx, zero, grad, residual, &result, &stats);
    if (s.code() != absl::StatusCode::kInvalidArgument) return absl::InternalError("interval");
    return absl::OkStatus();
  });
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace gradex::testing
