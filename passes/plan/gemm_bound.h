// The best a GEMM grid can do under the target's formulas alone (issue 16's
// "bound"): what plan-ownership ranks its GEMM candidates by and what
// inspect-gemms measures plans against.
//
// For [M,K] x [K,N] on m x k x n tiles, on the largest block of each
// dimension: one kernel call over the tile's whole block (the dtype's GEMM
// formula); the left operand's block received in one exchange phase at the
// exchange rate; with k > 1, the k - 1 remote partials of the tile's share
// of its block's rows received in one phase (16-bit partials when the
// result is 16-bit) and reduce_partials over them. Weights are resident.
// Memory: the weight block, the A block, the partial and the remote
// partials must fit the tile's capacity beside nothing else.
//
// What it ignores, so that no lowering can beat it: where the left operand
// already is (local copies, senders' limits, fragments), staging in chunks,
// the sync of a phase that could be shared, redistributions of the result
// for its consumers, and every other op's memory.

#ifndef TILEC_PASSES_PLAN_GEMM_BOUND_H_
#define TILEC_PASSES_PLAN_GEMM_BOUND_H_

#include <cstdint>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "kernels/cost.h"
#include "passes/core/attention_plan.h"

namespace tilec::plan {

struct GemmShapeDTypes {
  int64_t M = 0, K = 0, N = 0;
  fb::DType inputs = fb::DType::F16;  // the kernel's operand dtype
  fb::DType result = fb::DType::F16;
};

struct GemmBound {
  int m = 1, k = 1, n = 1;
  int64_t kernel = 0;    // one call on the largest block
  int64_t delivery = 0;  // sync + A block / rate
  int64_t partials = 0;  // sync + (k-1) partial shares / rate
  int64_t reduce = 0;    // reduce_partials on the largest share
  int64_t bytes = 0;     // per tile: B, A, partial and remote partials
  int64_t weight_bytes = 0;  // of which B's block
  int64_t Cycles() const { return kernel + delivery + partials + reduce; }
};

// The bound of one grid (no memory check).
StatusOr<GemmBound> BoundOfGrid(const kernels::CostModel& model,
                                const GemmShapeDTypes& gemm, int m, int k,
                                int n);

// Every grid whose blocks are distinct (part counts that change a block
// size), m*k*n <= tiles and m*k <= M, with its bound; those that fit
// `capacity` bytes per tile, fastest first (ties: fewer tiles).
std::vector<GemmBound> GridBounds(const kernels::CostModel& model,
                                  const GemmShapeDTypes& gemm, int64_t tiles,
                                  int64_t capacity);

// Attention GEMMs (passes/core/attention_plan.h), the same way: per
// (batch, head) an m x n grid with the inner dimension whole, so no
// partials. On the largest block: one kernel call (gemm_nt for the scores,
// charged gemm's formula, in qkv's dtype; for the context in the
// probabilities' dtype); every operand block received in one exchange phase
// at the exchange rate: q and k rows for the scores, the probability rows
// and the v columns for the context (an activation, unlike a MatMul's
// resident weight). Memory: those blocks and the result block. It ignores
// what the MatMul bound ignores (where qkv and the probabilities already
// lie, fragments, senders' limits), that the lowering delivers the
// probabilities in a redistribution phase of their own, and the kernel's
// smaller blocks.
struct AttentionDTypes {
  fb::DType qkv = fb::DType::F16;     // q, k and v
  fb::DType probs = fb::DType::F16;   // the context's left operand
  fb::DType result = fb::DType::F16;  // scores or context
};

// The bound of `grid`'s m x n (no memory check).
StatusOr<GemmBound> AttentionBoundOfGrid(const kernels::CostModel& model,
                                         const passes::AttentionGrid& grid,
                                         const AttentionDTypes& dtypes);

// Every m x n with distinct blocks on B*H*m*n <= tiles, with its bound;
// those that fit `capacity`, fastest first (ties: fewer tiles).
std::vector<GemmBound> AttentionGridBounds(const kernels::CostModel& model,
                                           const passes::AttentionGrid& grid,
                                           const AttentionDTypes& dtypes,
                                           int64_t tiles, int64_t capacity);

// Part counts p <= limit that give distinct largest block sizes of
// `extent`, ascending.
std::vector<int> DistinctSplits(int64_t extent, int64_t limit);

}  // namespace tilec::plan

#endif  // TILEC_PASSES_PLAN_GEMM_BOUND_H_
