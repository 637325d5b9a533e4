// dgs_trace: runs DgsWorkerState and one DgsServerShard (ps/dgs_*)
// over the wire frames (encode, decode, apply; no transport) on a scripted
// sequence of worker steps read from stdin, and prints every push, pull and
// the stepping worker's parameters as hex floats, for
// tests/python/dgs_cpp_reference_test.py to compare with gradex.dgs_reference
// bit for bit.
//
// stdin (whitespace-separated):
//   L size_1 .. size_L
//   W density momentum weight_decay lr0 full_sync_every S
//   init[total]                       (the model every worker starts from)
//   S times: k lr grad[total]         (worker k steps at lr with grad)
// stdout, one line per step:
//   k P (idx val)*P  F|S N (idx val)*N  params[total]
// (F: a full sync, N = total, idx 0..total-1; S: a sparse pull.)
#include <cstdio>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include "ps/dgs_frames.h"
#include "ps/dgs_server_shard.h"
#include "ps/dgs_worker.h"

namespace gradex {
namespace {

int Fail(const std::string& what, const absl::Status& s) {
  std::fprintf(stderr, "dgs_trace: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

void PrintSparse(const kernels::SparseVec& v) {
  std::printf(" %zu", v.nnz());
  for (size_t e = 0; e < v.nnz(); ++e) std::printf(" %u %a", v.idx[e], v.val[e]);
}

int Run() {
  uint32_t layers = 0;
  if (!(std::cin >> layers) || layers == 0 || layers > 64) {
    return Fail("input", absl::InvalidArgumentError("L must be 1..64"));
  }
  std::vector<uint32_t> sizes(layers);
  for (uint32_t& s : sizes) std::cin >> s;
  uint32_t workers = 0, full_sync_every = 0, steps = 0;
  float density = 0, momentum = 0, wd = 0, lr0 = 0;
  std::cin >> workers >> density >> momentum >> wd >> lr0 >> full_sync_every >> steps;
  if (!std::cin || workers == 0 || workers > 64) {
    return Fail("input", absl::InvalidArgumentError("header"));
  }
  absl::StatusOr<ps::DgsLayout> layout = ps::DgsLayout::Create(sizes);
  if (!layout.ok()) return Fail("layout", layout.status());
  const uint32_t total = static_cast<uint32_t>(layout->total());
  const ps::DgsRange range{0, total};
  std::vector<float> init(total);
  for (float& x : init) std::cin >> x;
  ps::DgsServerOptions so;
  so.workers = workers;
  so.full_sync_every = full_sync_every;
  absl::StatusOr<ps::DgsServerShard> shard = ps::DgsServerShard::Create(*layout, 0, range, so);
  if (!shard.ok()) return Fail("shard", shard.status());
  ps::DgsWireContext ctx;
  ctx.job_id = 1;
  ctx.layout = &*layout;
  ctx.range = range;
  ctx.workers = workers;
  ps::DgsWorkerOptions wo;
  wo.momentum = momentum;
  wo.weight_decay = wd;
  wo.density = density;
  wo.lr0 = lr0;
  std::vector<ps::DgsWorkerState> states;
  std::vector<std::vector<float>> params(workers, init);
  ps::DgsRefusal why;
  for (uint32_t k = 0; k < workers; ++k) {
    absl::StatusOr<ps::DgsWorkerState> w = ps::DgsWorkerState::Create(*layout, k, {range}, wo);
    if (!w.ok()) return Fail("worker", w.status());
    states.push_back(std::move(*w));
    absl::StatusOr<transport::Bytes> hello = ps::EncodeDgsHello(ctx, k, 1, params[k]);
    if (!hello.ok()) return Fail("hello", hello.status());
    ps::DgsMessage m, reply, got;
    absl::Status s = ps::DecodeDgsFromWorker(*hello, ctx, k, &m, &why);
    if (s.ok()) s = shard->Join(k, m.dense, &reply);
    absl::StatusOr<transport::Bytes> b =
        s.ok() ? ps::EncodeDgsReply(ctx, reply) : absl::StatusOr<transport::Bytes>(s);
    if (b.ok()) s = ps::DecodeDgsFromShard(*b, ctx, k, &got, &why);
    if (b.ok() && s.ok()) s = states[k].ApplyPull(0, got, params[k]);
    if (!b.ok() || !s.ok()) return Fail("join", b.ok() ? s : b.status());
  }
  std::vector<float> grad(total);
  for (uint32_t step = 0; step < steps; ++step) {
    uint32_t k = 0;
    float lr = 0;
    std::cin >> k >> lr;
    for (float& x : grad) std::cin >> x;
    if (!std::cin || k >= workers) return Fail("input", absl::InvalidArgumentError("step"));
    ps::DgsPush push;
    absl::Status s = states[k].MakePush(grad, params[k], lr, &push);
    if (!s.ok()) return Fail("push", s);
    absl::StatusOr<transport::Bytes> b =
        push.is_dense ? ps::EncodeDgsDensePush(ctx, k, 2 + step, states[k].version(0), push.dense)
                      : ps::EncodeDgsPush(ctx, k, 2 + step, states[k].version(0), push.ratio,
                                          kernels::View(push.entries));
    if (!b.ok()) return Fail("encode push", b.status());
    ps::DgsMessage m, reply, got;
    s = ps::DecodeDgsFromWorker(*b, ctx, k, &m, &why);
    if (s.ok()) s = shard->ApplyPush(k, m);
    if (s.ok()) s = shard->MakePull(k, &reply);
    if (!s.ok()) return Fail("server", s);
    b = ps::EncodeDgsReply(ctx, reply);
    if (!b.ok()) return Fail("encode pull", b.status());
    s = ps::DecodeDgsFromShard(*b, ctx, k, &got, &why);
    if (s.ok()) s = states[k].ApplyPull(0, got, params[k]);
    if (!s.ok()) return Fail("pull", s);
    std::printf("%u", k);
    PrintSparse(ps::DgsPushEntries(push));
    if (got.kind == ps::DgsKind::kFullSync) {
      std::printf(" F %u", total);
      for (uint32_t i = 0; i < total; ++i) std::printf(" %u %a", i, got.dense[i]);
    } else if (got.kind == ps::DgsKind::kDensePull) {
      // R = 1: the dense route's nonzeros are the sparse route's entries.
      kernels::SparseVec e;
      for (uint32_t i = 0; i < total; ++i) {
        if (got.dense[i] == 0.0f) continue;
        e.idx.push_back(i);
        e.val.push_back(got.dense[i]);
      }
      std::printf(" S");
      PrintSparse(e);
    } else {
      std::printf(" S");
      PrintSparse(got.sparse);
    }
    for (float x : params[k]) std::printf(" %a", x);
    std::printf("\n");
  }
  return 0;
}

}  // namespace
}  // namespace gradex

int main(int argc, char** argv) {
  if (argc > 1) {
    std::printf("usage: dgs_trace < script (see the comment at the top of dgs_trace.cc)\n");
    return std::string(argv[1]) == "--help" ? 0 : 2;
  }
  return gradex::Run();
}
