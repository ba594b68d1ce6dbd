// What the lowering emits for an attention op, as pure functions of its
// recipe and of how the fused qkv value is owned: the tile grid, the boxes
// each tile gathers, the one exchange that delivers them and the cycles of
// it all. The lowering (passes/lower) builds buffers and calls from these;
// the planner (passes/plan) prices recipes with the same functions
// (docs/planning.md, "Attention").
//
// Both ops read one head's q, k or v columns of qkv [B*T, 3*H*D] (columns
// [q heads | k heads | v heads]) as a view: a tile gathers exactly the rows
// and columns it multiplies, from wherever qkv lives, in the same exchange
// phase as any other operand delivery. Nothing copies whole heads first.
//
//   scores  S[b,h] = scale * Q[b,h] K[b,h]^T    [Tq, D] x [D, Tk] -> [Tq, Tk]
//   context C[b,h] = P[b,h] V[b,h]              [Tq, Tk] x [Tk, D] -> [Tq, D]
//
// Self-attention has Tq = Tk = T. The cross form (the MAP head: one probe
// query over the tokens) stages k and v from kv [B*Tk, 2*H*D] (columns
// [k heads | v heads]) the same way; its queries q [B*Tq, H*D] are a small
// operand of their own that the scores op needs owned as QueryNeeded (the
// planner prices the redistribution like the context's probabilities) and
// reads in place.
//
// Grid: per (batch b, head h) an m x n grid of tiles; position
// (b, h, mi, ni) runs on tile first + ((b*H + h)*m + mi)*n + ni and
// computes query rows mi (of Tq, balanced) and columns ni: key rows of Tk
// for scores, columns of D for context. The inner dimension (D for scores,
// Tk for context) is not split: one kernel call per tile, writing its block
// of the result directly (gemm_nt for scores, gemm for context).

#ifndef TILEC_PASSES_CORE_ATTENTION_PLAN_H_
#define TILEC_PASSES_CORE_ATTENTION_PLAN_H_

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "kernels/cost.h"
#include "passes/core/layout.h"
#include "passes/core/ownership.h"

namespace tilec::passes {

enum class AttentionPart { kScores, kContext };

struct AttentionGrid {
  AttentionPart part = AttentionPart::kScores;
  bool cross = false;  // staged operand kv [B*Tk, 2HD] rather than qkv
  int64_t B = 1, H = 1, Tq = 1, Tk = 1, D = 1;
  // Self-attention in image steps: the op's image b is image
  // first_image + b of qkv (its staged rows); its own result's are not
  // offset. 0 otherwise.
  int64_t first_image = 0;
  int m = 1, n = 1, first = 0;
  Split rows;  // query rows of Tq, m parts
  Split cols;  // scores: key rows of Tk; context: columns of D; n parts

  int64_t Tiles() const { return B * H * m * n; }
  int Tile(int64_t b, int64_t h, int mi, int ni) const {
    return first + static_cast<int>(((b * H + h) * m + mi) * n + ni);
  }
  // The columns of q (0), k (1) or v (2), all rows, in the staged
  // operand (cross: q's view is the whole q operand): the view an operand
  // need is expressed in.
  Box View(int which) const;
  // What each tile reads of the staged operand, in its indices: scores {q
  // rows mi (self only), k rows ni} of head h; context {v, all Tk rows,
  // columns ni} of head h.
  std::vector<Box> StagedBoxes(int64_t b, int64_t h, int mi, int ni) const;
  // Query rows mi of head h in q (the self form's q view or the cross
  // form's q operand) and the ownership holding them: blocked(B x H,
  // sub=m x 1, rep=n).
  Box QueryBox(int64_t b, int64_t h, int mi) const;
  fb::OwnershipT QueryNeeded() const;
  // The views of StagedBoxes, in the same order, and their ownerships
  // over those views (the tiles that need each element).
  std::vector<int> StagedViews() const;
  fb::OwnershipT StagedNeeded(int which) const;
  // Context: the probabilities a tile multiplies, P[b, h, rows mi, :], and
  // the ownership of P [B,H,T,T] that holds them: blocked(BxHxmx1, rep=n).
  Box ProbsBox(int64_t b, int64_t h, int mi) const;
  fb::OwnershipT ProbsNeeded() const;
  // The tile's block of the result: S[b, h, rows mi, keys ni] or the
  // context rows b*T + rows mi, columns h*D + cols ni; and the result's
  // ownership: blocked(BxHxmxn) for scores, blocked(BxH, sub=mxn) over
  // [B*T, H*D] for context.
  Box ResultBox(int64_t b, int64_t h, int mi, int ni) const;
  fb::OwnershipT ResultOwnership() const;
  // The kernel call of every tile: [rows, inner] x [inner, cols].
  int64_t Inner() const { return part == AttentionPart::kScores ? D : Tk; }

  // The same op on an m x n grid (first tile kept); an error (one
  // sentence) when m or n do not fit: 1 <= m <= Tq, and n <= Tk for
  // scores, n <= D for context.
  StatusOr<AttentionGrid> WithSplits(int m, int n) const;

  // Calls fn(b, h, mi, ni, tile) for every grid position in tile order.
  void ForEachTile(
      const std::function<void(int64_t, int64_t, int, int, int)>& fn) const;
};

// The grid of an m x n recipe for `part` with the staged operand's shape
// (qkv [N*T, 3*H*D] of which the op reads images [first_image,
// first_image + B), or all N = B of them for first_image -1 (Operation's
// attribute); or kv [B*Tk, 2*H*D] for cross-attention) and the
// scores or probabilities shape [B,H,Tq,Tk]. An error (one sentence) when
// the shapes disagree with heads/head_dim or m, n do not fit (m <= Tq,
// n <= Tk for scores and n <= D for context).
StatusOr<AttentionGrid> MakeAttentionGrid(AttentionPart part,
                                          std::span<const int64_t> qkv_shape,
                                          std::span<const int64_t> probs_shape,
                                          int64_t heads, int64_t head_dim,
                                          int m, int n, int first,
                                          int64_t first_image = -1);

// The delivery of every staged box: PlanTransfers from qkv's ownership to
// each view's need, merged into one exchange phase (a tile's staged boxes
// are distinct elements of qkv, so the merged plan still sends each element
// once per destination).
TransferPlan AttentionDelivery(const AttentionGrid& grid,
                               const fb::OwnershipT& qkv_owner,
                               std::span<const int64_t> qkv_shape,
                               int element_bytes);

struct AttentionCost {
  int64_t copy_cycles = 0;    // slowest tile's local copies into staging
  int64_t kernel_cycles = 0;  // slowest tile's kernel call
  int64_t compute = 0;        // the compute phases, as the lowering runs them
  TransferCost exchange;      // the delivery phase
  int phases = 0;             // exchange phases (0 or 1)
  int64_t stage_bytes = 0;    // staging buffers on the busiest tile
  int busiest_tile = -1;      // the tile of kernel_cycles
  int64_t Cycles() const { return compute + exchange.phase_cycles; }
};

// Cycles of the op as the lowering emits it: local copies (one copy call
// per run, CopyPricer) in a first compute phase, the delivery exchange,
// then one kernel call per tile (its formula by the staged dtype). With no
// transfers the copies and calls share one compute phase. kLowerBound
// prices the delivery by its transfers alone (each one fragment at either
// end), without its pieces or exchange tables: never above its schedule.
StatusOr<AttentionCost> PriceAttention(const AttentionGrid& grid,
                                       const fb::OwnershipT& qkv_owner,
                                       std::span<const int64_t> qkv_shape,
                                       fb::DType qkv_dtype,
                                       fb::DType probs_dtype,
                                       const kernels::CostModel& model,
                                       const fb::TargetT& target,
                                       PhaseTiming timing = PhaseTiming::kScheduled);

// The kernel of a tile: cycles of one call [rows, inner] x [inner, cols]
// with left operand dtype `a_dtype` (gemm_nt for scores is charged gemm's
// formulas: the same AMP work).
StatusOr<int64_t> AttentionKernelCycles(const AttentionGrid& grid,
                                        const kernels::CostModel& model,
                                        fb::DType a_dtype, int mi, int ni);

}  // namespace tilec::passes

#endif  // TILEC_PASSES_CORE_ATTENTION_PLAN_H_
