#include "collectives/algorithms/hierarchical.h"

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/algorithms/ring_allreduce.h"
#include "collectives/block_layout.h"
#include "collectives/link.h"
#include "collectives/phase_timer.h"
#include "collectives/residual_ledger.h"
#include "collectives/tag_space.h"
#include "collectives/wire/frame_blame.h"
#include "kernels/sparse.h"
#include "transport/subgroup_transport.h"

namespace gradex::collectives::algorithms {
namespace {

double Since(transport::Clock::time_point start) {
  return std::chrono::duration<double>(transport::Clock::now() - start).count();
}

// A failure inside a group: its ranks (the error's ranks are positions in
// that list) named, and a refused frame blamed on its sender's rank in the
// whole job.
absl::Status Blamed(absl::Status s, const wire::FrameBlame& local,
                    const transport::SubgroupTransport& view, wire::FrameBlame* into,
                    const char* stage) {
  if (into != nullptr && local.peer() >= 0 && local.peer() < view.size()) {
    into->Blame(view.world_rank(local.peer()), local.why());
  }
  std::vector<int> ranks;
  for (int i = 0; i < view.size(); ++i) ranks.push_back(view.world_rank(i));
  return absl::Status(s.code(),
                      absl::StrCat(stage, " (ranks ", absl::StrJoin(ranks, ", "), ", numbered 0..",
                                   view.size() - 1, " below): ", s.message()));
}

// The shard a local rank holds after the node's ring reduce-scatter.
int ShardOf(int local, int ranks_per_node) { return (local + 1) % ranks_per_node; }

// A shard's capacity (the most entries its result may hold) travels beside
// its result as a dense frame of two 16-bit halves, which a float holds
// exactly: the receiver then reports the bucket's whole capacity.
constexpr wire::BlockRange kCapacityRange{0, 2};

void AppendCapacity(const wire::FrameMeta& meta, uint32_t capacity, transport::Bytes* out) {
  const float halves[2] = {static_cast<float>(capacity & 0xffffu),
                           static_cast<float>(capacity >> 16)};
  wire::AppendDenseFrame(meta, kCapacityRange, halves, out);
}

absl::StatusOr<uint32_t> ReadCapacity(const kernels::SparseVec& frame, uint32_t shard_size,
                                      int from) {
  uint64_t halves[2] = {0, 0};
  for (size_t i = 0; i < frame.nnz(); ++i) {
    const float v = frame.val[i];
    if (!(v >= 0 && v <= 65535.0f) || v != static_cast<float>(static_cast<uint32_t>(v))) {
      return absl::DataLossError(
          absl::StrCat("node rank ", from, " sent a shard capacity half ", v));
    }
    halves[frame.idx[i]] = static_cast<uint64_t>(v);
  }
  const uint64_t capacity = halves[0] | (halves[1] << 16);
  if (capacity > shard_size) {
    return absl::DataLossError(absl::StrCat("node rank ", from, " announced a capacity of ",
                                            capacity, " for a shard of ", shard_size));
  }
  return static_cast<uint32_t>(capacity);
}

// What the inner call's statistics add to the whole call's: the model reads
// the data-dependent volumes from them, metrics the details.
void AddInner(const CallStats& inner, CallStats* stats) {
  stats->phases.selection_s += inner.phases.selection_s;
  stats->phases.communication_s += inner.phases.communication_s;
  stats->phases.reduction_s += inner.phases.reduction_s;
  stats->coo_entries_sent += inner.coo_entries_sent;
  stats->coo_entries_recv += inner.coo_entries_recv;
  stats->frames_sent += inner.frames_sent;
  stats->frames_recv += inner.frames_recv;
  stats->stream_frames_sent = inner.stream_frames_sent;
  stats->stream_frames_recv = inner.stream_frames_recv;
  for (const auto& [name, value] : inner.details) stats->details[name] = value;
}

}  // namespace

std::string HierarchyExclusion(const catalog::AlgorithmSpec& spec) {
  if (spec.traits.parameter_server) {
    return absl::StrCat(spec.name, " is a parameter-server exchange, not an allreduce");
  }
  if (spec.traits.ccr_profiled) {
    return absl::StrCat(spec.name,
                        "'s error feedback decays the residual, which the hierarchy keeps for a "
                        "node's sum where the flat exchange keeps one rank's");
  }
  if (!spec.traits.synchronous) {
    return absl::StrCat(spec.name, " lets ranks run ahead of each other");
  }
  return "";
}

std::string FlatReason(std::string_view algorithm, const catalog::NodeLayout& layout) {
  if (std::string why = catalog::FlatReason(layout); !why.empty()) return why;
  const catalog::AlgorithmSpec* spec = catalog::Find(algorithm);
  if (spec == nullptr) return absl::StrCat(std::string(algorithm), " is not in the catalog");
  return HierarchyExclusion(*spec);
}

AllreduceOptions InterNodeOptions(const AllreduceOptions& options, int nodes) {
  AllreduceOptions o = options;
  if (o.teams < 1 || o.teams > nodes || nodes % o.teams != 0) o.teams = 1;
  return o;
}

absl::StatusOr<std::unique_ptr<HierarchicalAllreduce>> HierarchicalAllreduce::Create(
    std::unique_ptr<SparseAllreduce> inner, catalog::NodeLayout layout) {
  if (inner == nullptr) return absl::InvalidArgumentError("no inner algorithm");
  if (std::string why = catalog::FlatReason(layout); !why.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the hierarchical exchange needs several nodes of several ranks: ", why));
  }
  const catalog::AlgorithmSpec* spec = catalog::Find(inner->name());
  if (spec == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(inner->name()), " is not in the catalog"));
  }
  if (std::string why = HierarchyExclusion(*spec); !why.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("runs flat only: ", why));
  }
  return std::unique_ptr<HierarchicalAllreduce>(
      new HierarchicalAllreduce(std::move(inner), std::move(layout)));
}

absl::Status HierarchicalAllreduce::CheckOptions(const CallContext& ctx,
                                                 const AllreduceOptions& options) const {
  if (ctx.transport->size() != layout_.world()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the node layout (", layout_.Describe(), ") holds ", layout_.world(),
                     " ranks, the communicator ", ctx.transport->size()));
  }
  return absl::OkStatus();
}

absl::Status HierarchicalAllreduce::Exchange(const CallContext& ctx,
                                             const AllreduceOptions& options, std::span<float> acc,
                                             ResidualLedger& /*ledger*/, AllreduceResult* result,
                                             CallStats* stats) {
  const int me = ctx.transport->rank();
  const int node = layout_.node_of[me], local = layout_.local_of[me];
  const int per_node = layout_.ranks_per_node(), nodes = layout_.nodes();
  const size_t n = acc.size();
  absl::StatusOr<std::unique_ptr<transport::SubgroupTransport>> node_view =
      transport::SubgroupTransport::Create(ctx.transport, layout_.node_ranks[node]);
  if (!node_view.ok()) return node_view.status();
  absl::StatusOr<std::unique_ptr<transport::SubgroupTransport>> group_view =
      transport::SubgroupTransport::Create(ctx.transport, layout_.Group(local));
  if (!group_view.ok()) return group_view.status();
  wire::FrameBlame node_blame, group_blame;
  CallContext node_ctx = ctx;
  node_ctx.transport = node_view->get();
  node_ctx.blame = &node_blame;
  Link link(node_ctx, id(), &stats->phases);
  const transport::PeerCounters intra_before = (*node_view)->TotalCounters();
  const transport::Clock::time_point start = transport::Clock::now();

  // 1. The node's sum of one shard. `acc` stays the rank's contribution
  // (grad + old residual) until the call has its result: the ring works on
  // a copy, and a failure anywhere leaves `acc` as the frame needs it.
  work_.assign(acc.begin(), acc.end());
  absl::StatusOr<int> held =
      RingReduceScatter(link, work_.data(), n, kTagPhaseNodeReduceScatter, &stats->phases);
  if (!held.ok())
    return Blamed(held.status(), node_blame, **node_view, ctx.blame, "inside the node");
  const BlockLayout shards(n, per_node, 1.0);
  const wire::BlockRange mine = shards.range(*held);
  double intra_s = Since(start);

  // 2. The shard across nodes.
  const transport::Clock::time_point inter_start = transport::Clock::now();
  const transport::PeerCounters inter_before = (*group_view)->TotalCounters();
  AllreduceResult shard_result;
  shard_result.is_dense = traits().dense;
  CallStats inner_stats;
  uint32_t capacity = 0;
  if (mine.size() > 0) {
    CallContext inner_ctx = ctx;
    inner_ctx.transport = group_view->get();
    inner_ctx.blame = &group_blame;
    inner_ctx.max_message_bytes = 0;  // the bound of the shard's call
    shard_residual_.assign(mine.size(), 0.0f);
    absl::Status s = inner_->Run(inner_ctx, InterNodeOptions(options, nodes),
                                 std::span<const float>(work_.data() + mine.begin, mine.size()),
                                 shard_residual_, &shard_result, &inner_stats);
    if (!s.ok()) return Blamed(std::move(s), group_blame, **group_view, ctx.blame, "across nodes");
    if (!shard_result.decayed.empty()) {
      return absl::InternalError(
          absl::StrCat(std::string(name()), " decayed its residual inside a node shard"));
    }
    capacity = static_cast<uint32_t>(std::min<size_t>(inner_stats.result_capacity, mine.size()));
  }
  const transport::PeerCounters inter_after = (*group_view)->TotalCounters();
  const double inter_s = Since(inter_start);

  // The shard's result in the bucket's indices, zeros dropped: what every
  // node peer decodes from its frame, so all ranks hold the same entries.
  kernels::SparseVec own;
  {
    PhaseTimer t(&stats->phases.reduction_s);
    if (shard_result.is_dense) {
      for (size_t i = 0; i < shard_result.dense.size() && i < mine.size(); ++i) {
        if (shard_result.dense[i] == 0.0f) continue;
        own.idx.push_back(mine.begin + static_cast<uint32_t>(i));
        own.val.push_back(shard_result.dense[i]);
      }
    } else {
      for (size_t i = 0; i < shard_result.sparse.nnz(); ++i) {
        if (shard_result.sparse.val[i] == 0.0f) continue;
        own.idx.push_back(mine.begin + shard_result.sparse.idx[i]);
        own.val.push_back(shard_result.sparse.val[i]);
      }
    }
  }

  // 3. Every shard's result to every rank of the node.
  const transport::Clock::time_point gather_start = transport::Clock::now();
  std::vector<kernels::SparseVec> by_shard(per_node);
  std::vector<uint32_t> capacities(per_node, 0);
  uint64_t gather_recv_model = 0;
  const size_t own_entries = own.nnz();
  by_shard[*held] = std::move(own);
  capacities[*held] = capacity;
  {
    std::vector<Link::Pending> recvs(per_node), sends(per_node);
    for (int q = 0; q < per_node; ++q) {
      if (q == local) continue;
      const wire::BlockRange theirs = shards.range(ShardOf(q, per_node));
      absl::StatusOr<Link::Pending> r =
          link.PostRecv(q, kTagPhaseNodeAllGather, 0,
                        wire::FrameBytes(theirs.size(), theirs.size()) + wire::FrameBytes(2, 2));
      if (!r.ok()) return Blamed(r.status(), node_blame, **node_view, ctx.blame, "inside the node");
      recvs[q] = *r;
    }
    for (int q = 0; q < per_node; ++q) {
      if (q == local) continue;
      transport::Bytes out = link.Buffer(wire::FrameBytes(mine.size(), by_shard[*held].nnz()) +
                                         wire::FrameBytes(2, 2));
      wire::AppendBlockFrame(link.meta(kTagPhaseNodeAllGather), mine,
                             kernels::View(by_shard[*held]), &out);
      AppendCapacity(link.meta(kTagPhaseNodeAllGather), capacity, &out);
      absl::StatusOr<Link::Pending> s = link.PostSend(q, std::move(out), kTagPhaseNodeAllGather, 0);
      if (!s.ok()) return Blamed(s.status(), node_blame, **node_view, ctx.blame, "inside the node");
      sends[q] = *s;
    }
    for (int q = 0; q < per_node; ++q) {
      if (q == local) continue;
      transport::Bytes in;
      absl::Status s = link.Wait(recvs[q], &in);
      const int shard = ShardOf(q, per_node);
      const wire::BlockRange theirs = shards.range(shard);
      std::vector<kernels::SparseVec> frames;
      if (s.ok()) {
        PhaseTimer t(&stats->phases.reduction_s);
        const wire::ExpectedBlock expected[2] = {{theirs, theirs.size()}, {kCapacityRange, 2}};
        s = wire::DecodeSparseBlocks(in, link.meta(kTagPhaseNodeAllGather, q), expected, &frames);
        link.Recycle(std::move(in));
      }
      if (s.ok()) {
        absl::StatusOr<uint32_t> c = ReadCapacity(frames[1], theirs.size(), q);
        if (c.ok() && frames[0].nnz() > *c) {
          c = absl::DataLossError(absl::StrCat("node rank ", q, " sent ", frames[0].nnz(),
                                               " entries for a shard capacity of ", *c));
        }
        if (c.ok()) {
          capacities[shard] = *c;
          gather_recv_model +=
              wire::FrameBytes(theirs.size(), frames[0].nnz()) + wire::FrameBytes(2, 2);
          by_shard[shard] = std::move(frames[0]);
        } else {
          node_blame.Blame(q, std::string(c.status().message()));
          s = c.status();
        }
      }
      if (!s.ok())
        return Blamed(std::move(s), node_blame, **node_view, ctx.blame, "inside the node");
    }
    for (int q = 0; q < per_node; ++q) {
      if (q == local) continue;
      absl::Status s = link.Wait(sends[q], nullptr);
      if (!s.ok())
        return Blamed(std::move(s), node_blame, **node_view, ctx.blame, "inside the node");
    }
  }
  intra_s += Since(gather_start);

  // The bucket's result, shard by shard (shards are contiguous and in order).
  {
    PhaseTimer t(&stats->phases.reduction_s);
    result->is_dense = traits().dense;
    result->sparse.clear();
    result->dense.clear();
    if (result->is_dense) {
      result->dense.assign(n, 0.0f);
      for (const kernels::SparseVec& s : by_shard) {
        for (size_t i = 0; i < s.nnz(); ++i) result->dense[s.idx[i]] = s.val[i];
      }
    } else {
      for (const kernels::SparseVec& s : by_shard) {
        result->sparse.idx.insert(result->sparse.idx.end(), s.idx.begin(), s.idx.end());
        result->sparse.val.insert(result->sparse.val.end(), s.val.begin(), s.val.end());
      }
    }
  }
  // Where the epoch refuses non-finite values, a sum that overflowed fails
  // here, before `acc` changes (the frame would otherwise restore a
  // residual this call had already rewritten).
  if (ctx.refuse_nonfinite) {
    const std::vector<float>& values = result->is_dense ? result->dense : result->sparse.val;
    const size_t bad = kernels::FirstNonFinite(values.data(), values.size());
    if (bad < values.size()) {
      return absl::DataLossError(absl::StrCat(
          wire::kSumOverflowed, " at element ", result->is_dense ? bad : result->sparse.idx[bad],
          "; every rank fails this step and keeps its contribution in its residual"));
    }
  }
  // The call succeeded: the rank's whole contribution went into the node's
  // sums, and its residual becomes its shard's (what the inner call owes).
  // Written directly, not through the ledger: a ledger of every entry of
  // the bucket cost more than the exchange (no residual is taken out before
  // this point, so a failure has nothing to put back).
  {
    PhaseTimer t(&stats->phases.reduction_s);
    std::fill(acc.begin(), acc.end(), 0.0f);
    if (mine.size() > 0)
      std::copy(shard_residual_.begin(), shard_residual_.end(), acc.begin() + mine.begin);
  }
  AddInner(inner_stats, stats);
  size_t total_capacity = 0;
  for (uint32_t c : capacities) total_capacity += c;
  stats->result_capacity = result->is_dense ? n : total_capacity;
  stats->result_nnz = result->CountNonZeros();
  const transport::PeerCounters intra_after = (*node_view)->TotalCounters();
  stats->details[std::string(kDetailHierarchyNodes)] = nodes;
  stats->details[std::string(kDetailHierarchyRanksPerNode)] = per_node;
  stats->details[std::string(kDetailIntraNodeSentBytes)] =
      static_cast<double>(intra_after.sent_bytes - intra_before.sent_bytes);
  stats->details[std::string(kDetailIntraNodeRecvBytes)] =
      static_cast<double>(intra_after.recv_bytes - intra_before.recv_bytes);
  stats->details[std::string(kDetailInterNodeSentBytes)] =
      static_cast<double>(inter_after.sent_bytes - inter_before.sent_bytes);
  stats->details[std::string(kDetailInterNodeRecvBytes)] =
      static_cast<double>(inter_after.recv_bytes - inter_before.recv_bytes);
  stats->details[std::string(kDetailIntraNodeSeconds)] = intra_s;
  stats->details[std::string(kDetailNodeGatherEntriesSent)] = static_cast<double>(own_entries);
  stats->details[std::string(kDetailNodeGatherFrameBytesRecv)] =
      static_cast<double>(gather_recv_model);
  stats->details[std::string(kDetailInterNodeSeconds)] = inter_s;
  return absl::OkStatus();
}

absl::StatusOr<Volume> HierarchicalAllreduce::ModelVolume(int rank, int world, size_t n,
                                                          const AllreduceOptions& options,
                                                          const CallStats& observed) const {
  if (world != layout_.world() || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " of ", world, " outside ", layout_.Describe()));
  }
  const int per_node = layout_.ranks_per_node(), nodes = layout_.nodes();
  const int local = layout_.local_of[rank];
  const BlockLayout shards(n, per_node, 1.0);
  const wire::BlockRange mine = shards.range(ShardOf(local, per_node));
  Volume v = RingReduceScatterVolume(local, per_node, n);
  if (mine.size() > 0) {
    absl::StatusOr<Volume> inner = inner_->ModelVolume(layout_.node_of[rank], nodes, mine.size(),
                                                       InterNodeOptions(options, nodes), observed);
    if (!inner.ok()) return inner.status();
    v.sent_bytes += inner->sent_bytes;
    v.recv_bytes += inner->recv_bytes;
    v.messages += inner->messages;
  }
  // The all-gather: this rank's shard result (its observed entries, in the
  // smaller encoding) and capacity frame to each of the node's other ranks;
  // theirs back, priced from what was received.
  const uint64_t sent =
      wire::FrameBytes(mine.size(),
                       static_cast<uint64_t>(observed.Detail(kDetailNodeGatherEntriesSent))) +
      wire::FrameBytes(2, 2);
  v.sent_bytes += sent * (per_node - 1);
  v.messages += per_node - 1;
  v.recv_bytes += static_cast<uint64_t>(observed.Detail(kDetailNodeGatherFrameBytesRecv));
  return v;
}

}  // namespace gradex::collectives::algorithms
