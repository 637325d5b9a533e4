// The hierarchical exchange: dense inside a node, sparse across nodes. On a
// layout of N nodes of L ranks each (catalog/node_layout.h), a call
//   1. reduce-scatters the bucket (gradient + residual) densely among the
//      node's L ranks (a ring on the node's view of the transport), so that
//      each holds the node's sum of one shard (1/L of the bucket);
//   2. runs the inner algorithm on that shard across the N nodes (the view of
//      the ranks holding the same shard, one a node), at the call's density,
//      which then applies to the shard: the bytes leaving a node are one
//      rank's flat exchange over N ranks, not L of them;
//   3. all-gathers the shards' results inside the node, so every rank ends
//      with the whole result, bitwise the same everywhere.
// The shard's residual (error feedback) lives with the rank that holds the
// shard: whatever a rank's residual holds elsewhere (from a flat epoch) joins
// the reduce-scatter and so moves to the shard's holder. The call frame and
// invariants 1-3 hold for the whole bucket: the residual is rewritten only
// once the call has its result (not through the ledger), so a failed call
// leaves the rank's gradient + old residual as it was. Momentum correction stays per
// rank over the whole bucket: it is linear, so the node's shard sees the
// momentum of its sum.
#ifndef GRADEX_COLLECTIVES_ALGORITHMS_HIERARCHICAL_H_
#define GRADEX_COLLECTIVES_ALGORITHMS_HIERARCHICAL_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "catalog/catalog.h"
#include "catalog/node_layout.h"
#include "collectives/sparse_allreduce.h"

namespace gradex::collectives::algorithms {

// Why a catalog algorithm cannot be the inter-node stage ("" when it can):
// parameter-server entries (dgs) are not allreduces; COVAP's error feedback
// decays the residual the shard's holder keeps, which would decay a node's
// sum where the flat exchange decays one rank's.
std::string HierarchyExclusion(const catalog::AlgorithmSpec& spec);
// Why `algorithm` runs flat on `layout` ("" when it runs hierarchical): the
// layout's reason (catalog::FlatReason), an algorithm the catalog lacks, or
// its exclusion.
std::string FlatReason(std::string_view algorithm, const catalog::NodeLayout& layout);

// CallStats::details the hierarchical exchange adds (besides the inner
// algorithm's own): the layout, and bytes and wall time inside the node
// (reduce-scatter + all-gather) and across nodes (the inner algorithm).
inline constexpr std::string_view kDetailHierarchyNodes = "hierarchy_nodes";
inline constexpr std::string_view kDetailHierarchyRanksPerNode = "hierarchy_ranks_per_node";
inline constexpr std::string_view kDetailIntraNodeSentBytes = "intra_node_sent_bytes";
inline constexpr std::string_view kDetailIntraNodeRecvBytes = "intra_node_recv_bytes";
inline constexpr std::string_view kDetailInterNodeSentBytes = "inter_node_sent_bytes";
inline constexpr std::string_view kDetailInterNodeRecvBytes = "inter_node_recv_bytes";
inline constexpr std::string_view kDetailIntraNodeSeconds = "intra_node_s";
inline constexpr std::string_view kDetailInterNodeSeconds = "inter_node_s";
// The all-gather's data-dependent sizes, which the volume model prices: the
// entries of this rank's shard result, and the frame bytes of the shards
// received (each at FrameBytes of its size and entries).
inline constexpr std::string_view kDetailNodeGatherEntriesSent = "node_gather_entries_sent";
inline constexpr std::string_view kDetailNodeGatherFrameBytesRecv = "node_gather_frame_bytes_recv";

class HierarchicalAllreduce : public SparseAllreduce {
 public:
  // `layout` must be hierarchical (catalog::Hierarchical) and `inner` may
  // not be excluded (HierarchyExclusion); Create checks both.
  static absl::StatusOr<std::unique_ptr<HierarchicalAllreduce>> Create(
      std::unique_ptr<SparseAllreduce> inner, catalog::NodeLayout layout);

  // The inner algorithm's name: catalog entry, frame id and metrics are its.
  std::string_view name() const override { return inner_->name(); }
  const catalog::NodeLayout& layout() const { return layout_; }
  SparseAllreduce& inner() const { return *inner_; }

  // Inside the node: the ring reduce-scatter's dense frames and the
  // all-gather's frames (read from `observed`'s details, which are data
  // dependent); across nodes: the inner algorithm's model for its shard.
  absl::StatusOr<Volume> ModelVolume(int rank, int world, size_t n, const AllreduceOptions& options,
                                     const CallStats& observed) const override;

 protected:
  absl::Status CheckOptions(const CallContext& ctx, const AllreduceOptions& options) const override;
  absl::Status Exchange(const CallContext& ctx, const AllreduceOptions& options,
                        std::span<float> acc, ResidualLedger& ledger, AllreduceResult* result,
                        CallStats* stats) override;
  void AfterFailure() override {}

 private:
  HierarchicalAllreduce(std::unique_ptr<SparseAllreduce> inner, catalog::NodeLayout layout)
      : inner_(std::move(inner)), layout_(std::move(layout)) {}

  std::unique_ptr<SparseAllreduce> inner_;
  const catalog::NodeLayout layout_;
  // Scratch kept across calls: the bucket the node's ring reduces, and the
  // shard's residual for the inner call.
  std::vector<float> work_, shard_residual_;
};

// The options the inner algorithm runs with across N nodes: the call's,
// with the team count kept only where it divides N (else 1: one team).
AllreduceOptions InterNodeOptions(const AllreduceOptions& options, int nodes);

}  // namespace gradex::collectives::algorithms

#endif  // GRADEX_COLLECTIVES_ALGORITHMS_HIERARCHICAL_H_
