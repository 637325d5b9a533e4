// The sparse building blocks of the SparDL family, written against Link:
// Spar-Reduce-Scatter inside a group and a Bruck all-gather of sparse blocks.
#ifndef GRADEX_COLLECTIVES_ALGORITHMS_SPARSE_STEPS_H_
#define GRADEX_COLLECTIVES_ALGORITHMS_SPARSE_STEPS_H_

#include <span>
#include <vector>

#include "absl/status/status.h"
#include "collectives/block_layout.h"
#include "collectives/link.h"
#include "collectives/residual_ledger.h"
#include "kernels/sparse.h"

namespace gradex::collectives::algorithms {

// The local selection's quota per block of `layout` for member `me` of
// Spar-Reduce-Scatter: block me + t keeps keep * (1 + the bags that bring it
// to this member before it leaves, every step's for its own block), capped
// at its size. Each re-selection then cuts the exact top of this member's
// whole accumulation plus what it received (an entry that is not among the
// member's top keep + r can never pass r received entries); the paper's
// keep alone rations what a member's residual, which collects the discards
// of its blocks, can give back per step. The messages are unchanged: a block
// is cut to keep before it leaves.
std::vector<size_t> SrsLocalKeeps(const BlockLayout& layout, int me);

// Spar-Reduce-Scatter (SparDL section 3.1) over `group`, whose member j owns
// block j of `layout`, from `held`: the top entries of every block of the
// whole gradient + residual (keep: the paper's, or SrsLocalKeeps), selected
// before any message (LocalTopK's SelectBlocks, in the call's local part)
// and recorded in the ledger. Bags go out largest
// first (distance 2^(S-s) at step s); after each receive only the blocks of
// the next bag are re-selected. On return `owned` is this member's block
// reduced over the group and cut to its keep count; every discard is in
// `ledger`. With `keep_cancelled` a sum that cancels stays as -0
// (kernels::MergeAddKeepCancelled).
absl::Status SparReduceScatter(Link& link, const Group& group, const BlockLayout& layout,
                               std::vector<kernels::SparseVec> held, uint16_t phase,
                               bool keep_cancelled, ResidualLedger& ledger, PhaseTimes* times,
                               kernels::SparseVec* owned);

// Bruck all-gather: member j contributes one block described by expect[j];
// at step s everything gathered so far goes to me - 2^s and comes from
// me + 2^s. On return (*all)[j] is member j's block (own block included).
absl::Status BruckAllGather(Link& link, const Group& group,
                            std::span<const wire::ExpectedBlock> expect, uint16_t phase,
                            PhaseTimes* times, kernels::SparseVec mine,
                            std::vector<kernels::SparseVec>* all);

// out = a + b: kernels::MergeAddKeepCancelled with `keep_cancelled` (a sum
// that cancels stays as -0), else kernels::MergeAdd.
void MergeSums(kernels::SparseView a, kernels::SparseView b, bool keep_cancelled,
               kernels::SparseVec* out);

// kernels::SparseTopK (which never keeps a zero) that, with `keep_cancelled`,
// fills the room the nonzeros leave with cancelled sums (-0, lowest index
// first): a block with room delivers them instead of cutting them.
void CutToKeep(kernels::SparseView in, size_t k, bool keep_cancelled, kernels::SparseVec* kept,
               kernels::SparseVec* dropped);

// Removes the entries the wire does not carry (+0; a -0 is a cancelled sum,
// kept) so that every copy of a block is the same whatever carried it.
void DropZeros(kernels::SparseVec* v);

// Concatenates blocks covering ascending, disjoint ranges into one COO vector.
void ConcatBlocks(std::vector<kernels::SparseVec>& blocks, kernels::SparseVec* out);

}  // namespace gradex::collectives::algorithms

#endif  // GRADEX_COLLECTIVES_ALGORITHMS_SPARSE_STEPS_H_
