// Helpers of the DGS tests: integer-valued gradients, and the wire path
// between a DgsWorkerState and a DgsServerShard (encode, decode, apply)
// without a transport, so that the state tests also cross the frames.
#ifndef GRADEX_TESTS_DGS_DGS_UTIL_H_
#define GRADEX_TESTS_DGS_DGS_UTIL_H_

#include <algorithm>
#include <random>
#include <span>
#include <vector>

#include "gtest/gtest.h"
#include "ps/dgs_frames.h"
#include "ps/dgs_server_shard.h"
#include "ps/dgs_worker.h"

namespace gradex::dgs_test {

inline ps::DgsLayout MakeLayout(std::vector<uint32_t> sizes) {
  absl::StatusOr<ps::DgsLayout> l = ps::DgsLayout::Create(std::move(sizes));
  EXPECT_TRUE(l.ok()) << l.status();
  return *l;
}

// Integers in [-8, 8], zeros included (they must never be selected).
inline std::vector<float> IntGrad(size_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> d(-8, 8);
  std::vector<float> g(n);
  for (float& x : g) x = static_cast<float>(d(rng));
  return g;
}

inline ps::DgsWireContext Context(const ps::DgsServerShard& shard) {
  ps::DgsWireContext c;
  c.job_id = 7;
  c.epoch = 3;
  c.layout = &shard.layout();
  c.shard = shard.shard();
  c.range = shard.range();
  c.workers = shard.options().workers;
  return c;
}

// Sends `reply` over the wire (encode, decode as the worker does).
inline ps::DgsMessage ToWorker(const ps::DgsWireContext& ctx, const ps::DgsMessage& reply) {
  absl::StatusOr<transport::Bytes> b = ps::EncodeDgsReply(ctx, reply);
  EXPECT_TRUE(b.ok()) << b.status();
  ps::DgsMessage m;
  ps::DgsRefusal why;
  absl::Status s = ps::DecodeDgsFromShard(*b, ctx, reply.worker, &m, &why);
  EXPECT_TRUE(s.ok()) << s;
  return m;
}

// Worker k's hello to `shard` and the full sync applied to params.
inline void Join(ps::DgsServerShard& shard, ps::DgsWorkerState& w, std::vector<float>& params) {
  const ps::DgsWireContext ctx = Context(shard);
  const ps::DgsRange r = shard.range();
  absl::StatusOr<transport::Bytes> hello = ps::EncodeDgsHello(
      ctx, w.worker(), 1, std::span<const float>(params).subspan(r.begin, r.size()));
  ASSERT_TRUE(hello.ok());
  ps::DgsMessage m, reply;
  ps::DgsRefusal why;
  ASSERT_TRUE(ps::DecodeDgsFromWorker(*hello, ctx, w.worker(), &m, &why).ok());
  ASSERT_TRUE(shard.Join(w.worker(), m.dense, &reply).ok());
  ASSERT_TRUE(w.ApplyPull(shard.shard(), ToWorker(ctx, reply), params).ok());
}

// A dense message's values as sorted global entries (its nonzeros).
inline kernels::SparseVec Nonzeros(std::span<const float> dense, uint32_t base) {
  kernels::SparseVec e;
  for (size_t i = 0; i < dense.size(); ++i) {
    if (dense[i] == 0.0f) continue;
    e.idx.push_back(base + static_cast<uint32_t>(i));
    e.val.push_back(dense[i]);
  }
  return e;
}

// The part of `push` for `shard`, over the wire, applied; then the pull back.
// Returns the decoded pull (what the worker applied); a kDensePull's
// nonzeros are also put in its `sparse`, for the tests to read as entries.
inline ps::DgsMessage PushPull(ps::DgsServerShard& shard, ps::DgsWorkerState& w,
                               const ps::DgsPush& push, std::vector<float>& params) {
  const ps::DgsWireContext ctx = Context(shard);
  absl::StatusOr<transport::Bytes> b;
  kernels::SparseVec part;
  std::span<const float> dense_part;
  if (push.is_dense) {
    dense_part = std::span<const float>(push.dense).subspan(ctx.range.begin, ctx.range.size());
    b = ps::EncodeDgsDensePush(ctx, w.worker(), 2, w.version(shard.shard()), dense_part);
  } else {
    for (size_t e = 0; e < push.entries.nnz(); ++e) {
      if (push.entries.idx[e] >= ctx.range.begin && push.entries.idx[e] < ctx.range.end) {
        part.idx.push_back(push.entries.idx[e]);
        part.val.push_back(push.entries.val[e]);
      }
    }
    b = ps::EncodeDgsPush(ctx, w.worker(), 2, w.version(shard.shard()), push.ratio,
                          kernels::View(part));
  }
  EXPECT_TRUE(b.ok()) << b.status();
  ps::DgsMessage m, reply;
  ps::DgsRefusal why;
  EXPECT_TRUE(ps::DecodeDgsFromWorker(*b, ctx, w.worker(), &m, &why).ok());
  if (push.is_dense) {
    EXPECT_EQ(m.kind, ps::DgsKind::kDensePush);
    EXPECT_TRUE(std::equal(m.dense.begin(), m.dense.end(), dense_part.begin(), dense_part.end()));
  } else {
    EXPECT_EQ(m.sparse.idx, part.idx);
    EXPECT_EQ(m.sparse.val, part.val);
  }
  absl::Status s = shard.ApplyPush(w.worker(), m);
  EXPECT_TRUE(s.ok()) << s;
  s = shard.MakePull(w.worker(), &reply);
  EXPECT_TRUE(s.ok()) << s;
  ps::DgsMessage got = ToWorker(ctx, reply);
  s = w.ApplyPull(shard.shard(), got, params);
  EXPECT_TRUE(s.ok()) << s;
  if (got.kind == ps::DgsKind::kDensePull) got.sparse = Nonzeros(got.dense, ctx.range.begin);
  return got;
}

}  // namespace gradex::dgs_test

#endif  // GRADEX_TESTS_DGS_DGS_UTIL_H_
