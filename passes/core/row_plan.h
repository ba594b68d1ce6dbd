// The row movement of a CopyRows op (formats/tilec.fbs): which tile sends
// which rows of which operand to which tiles of the result, which rows a
// tile copies locally, and what that costs. The lowering emits exactly this
// plan and the planner prices it (one definition of both, as PlanTransfers
// is for Redistribute).

#ifndef TILEC_PASSES_CORE_ROW_PLAN_H_
#define TILEC_PASSES_CORE_ROW_PLAN_H_

#include <cstdint>
#include <span>
#include <vector>

#include "formats/op_shapes.h"
#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "kernels/cost.h"
#include "passes/core/layout.h"
#include "passes/core/ownership.h"

namespace tilec::passes {

// One operand of the op: its ownership and shape.
struct RowOperand {
  const fb::OwnershipT* ownership = nullptr;
  std::span<const int64_t> shape;
};

// A destination of a row transfer: the rows land on `tile` at the source
// box's rows + `shift` (result row = operand row + shift).
struct RowDestination {
  int tile = 0;
  int64_t shift = 0;
  friend bool operator==(const RowDestination&, const RowDestination&) =
      default;
};

// `source_tile` sends `box` (the operand's indices) of operand `operand` to
// every destination at once: a multicast, as PlanTransfers' transfers are.
// A destination tile may appear more than once with different shifts (a
// position table broadcast to two images on one tile).
struct RowTransfer {
  int operand = 0;
  int source_tile = 0;
  Box box;
  std::vector<RowDestination> destinations;
  int64_t elements = 0;
  int64_t bytes = 0;
};

// `tile` copies `box` of operand `operand`, which it holds, to result rows
// box rows + shift, which it also holds.
struct RowLocalCopy {
  int operand = 0;
  int tile = 0;
  Box box;
  int64_t shift = 0;
  int64_t elements = 0;
  int64_t bytes = 0;
};

struct RowCopyPlan {
  std::vector<RowTransfer> transfers;
  std::vector<RowLocalCopy> local_copies;
};

// Every element each tile holds of the result under `result` arrives exactly
// once: as a local copy where the tile holds the source rows itself, else
// in one transfer. Segments are visited in order, then destination tiles
// ascending, then their boxes; each piece (the overlap of a destination box
// with one source block) is sent by the replica of that block that has sent
// the fewest bytes so far (ties: the lowest tile), and destinations asking
// for the same piece of the same block share its transfer. Deterministic.
RowCopyPlan PlanRowCopies(std::span<const RowOperand> operands,
                          const fb::OwnershipT& result,
                          std::span<const int64_t> result_shape,
                          std::span<const ir::RowSegment> rows,
                          int element_bytes);

// The exchange phase of the plan (the loads of CostOfPlan for a
// Redistribute: a multicast costs its sender once and each destination in
// full), timed by its schedule over the runs the lowering moves
// (TimeExchange). local_copy_cycles is left 0: see RowCopyCycles.
TransferCost RowExchangeCost(const RowCopyPlan& plan,
                             std::span<const RowOperand> operands,
                             const fb::OwnershipT& result,
                             std::span<const int64_t> result_shape,
                             int element_bytes, const fb::TargetT& target,
                             PhaseTiming timing = PhaseTiming::kScheduled);

// A tile's storage of operand rows, seen in the result's rows: `segments`
// with every box moved down by `shift` rows. The lowering hands Move the
// shifted storage so that one box names the rows on both sides.
Segments ShiftRows(const Segments& segments, int64_t shift);

// `box` moved down by `shift` rows.
Box ShiftBox(Box box, int64_t shift);

// The slowest tile's local copies, as the lowering emits them: per local
// copy one `copy` call per run between the operand's storage (its held
// boxes back to back) and the result's. Sets *slowest_tile if not null.
StatusOr<int64_t> RowCopyCycles(const RowCopyPlan& plan,
                                std::span<const RowOperand> operands,
                                const fb::OwnershipT& result,
                                std::span<const int64_t> result_shape,
                                int element_bytes,
                                const kernels::CostModel& model,
                                int* slowest_tile = nullptr);

}  // namespace tilec::passes

#endif  // TILEC_PASSES_CORE_ROW_PLAN_H_
