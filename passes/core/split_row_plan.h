// LayerNorm over split rows (docs/lowering.md): the column slices a layout
// gives each tile, the row group whose partial moments each slice combines,
// the gather of those partials, and what the op costs. The lowering emits
// exactly this plan and the planner prices it (one definition of both, as
// row_plan.h is for CopyRows).

#ifndef TILEC_PASSES_CORE_SPLIT_ROW_PLAN_H_
#define TILEC_PASSES_CORE_SPLIT_ROW_PLAN_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "kernels/cost.h"
#include "passes/core/layout.h"
#include "passes/core/ownership.h"

namespace tilec::passes {

// A tile's column slice of a [rows, w] value.
struct RowSlice {
  int tile = 0;
  Box box;
};

struct SplitRowPlan {
  // Every box the layout holds: tiles in TilesUsed order, then each tile's
  // held boxes.
  std::vector<RowSlice> slices;
  // Per slice, its row group in column order: one slice (index) per column
  // block over the same rows, the slice itself for its own block, else the
  // first found on its tile, else the first found.
  std::vector<std::vector<int>> groups;
  // The partial moments that cross tiles: each slice's rows [r0, r1) x
  // [0, 3) (F32) from its tile, once, to every slice that asks for it, in
  // the order the slices ask (a destination per asking slice). Members on
  // the asking slice's own tile are local copies instead.
  std::vector<Transfer> gathers;
};

// True if some tile holds less than whole rows of `shape` (rank 2) under
// `layout`: a LayerNorm then runs over split rows.
bool HasSplitRows(const fb::OwnershipT& layout, std::span<const int64_t> shape);

// The plan of `layout` over a [rows, w] value; BadInput when column slices
// of different row blocks overlap (split rows need aligned row blocks).
// `where` prefixes the message.
StatusOr<SplitRowPlan> PlanSplitRows(const fb::OwnershipT& layout,
                                     std::span<const int64_t> shape,
                                     const std::string& where);

// The least cycles the gather of `column_parts` slices of `rows` rows can
// take: a tile receives the other column_parts - 1 partials (rows x 3 F32)
// at the target's exchange rate (the endpoint bound's receive term, which
// no schedule beats, without the sync).
int64_t GatherReceiveBound(int64_t rows, int64_t column_parts,
                           const fb::TargetT& target);

struct SplitRowCost {
  int64_t moments = 0;    // slowest tile's ln_moments calls
  int64_t normalize = 0;  // slowest tile's copies, moments_combine, normalize
  int64_t compute = 0;    // the compute phases as the lowering runs them
  TransferCost exchange;  // the gather
  int phases = 0;         // exchange phases (0 or 1)
  // Scratch per tile: each slice's partial, its remote partials and its
  // combined moments (F32 [rows, 3] each).
  std::vector<int64_t> scratch;
  int64_t Cycles() const { return compute + exchange.phase_cycles; }
};

// The op as the lowering emits it, its result in `out_dtype`: partial
// moments per slice (one compute phase), the gather (one exchange phase),
// then per slice its local partial copies, moments_combine over the row
// group and normalize (one compute phase). With no gather the two compute
// phases are one.
StatusOr<SplitRowCost> PriceSplitRows(const SplitRowPlan& plan,
                                      fb::DType out_dtype,
                                      const kernels::CostModel& model,
                                      const fb::TargetT& target,
                                      PhaseTiming timing = PhaseTiming::kScheduled);

}  // namespace tilec::passes

#endif  // TILEC_PASSES_CORE_SPLIT_ROW_PLAN_H_
