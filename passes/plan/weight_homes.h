// Weight homes (docs/planning.md, "Weight homes"; docs/planner.md,
// "Weight homes"): when the plan with every weight resident in its
// consumer's layout does not fit, every weight gets a home (each element
// once, shaped for delivery to its consumer's layout: HomeOwnershipIn) and
// is redistributed to its compute layout just before its use, through the
// ordinary Redistribute machinery; homes that sit whole on few tiles are
// spread where that is what does not fit; then weights are promoted back to
// resident compute layout, most cycles saved per byte first, while the
// whole program still fits.

#ifndef TILEC_PASSES_PLAN_WEIGHT_HOMES_H_
#define TILEC_PASSES_PLAN_WEIGHT_HOMES_H_

#include <functional>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "passes/plan/cost.h"
#include "passes/plan/graph.h"
#include "passes/plan/plan.h"

namespace tilec::plan {

// `plan` with every weight of the graph in its home, shaped for delivery.
// Successive weights' homes take successive replicas (and their flat
// fallbacks start where the previous one ended, mod the tile count), so
// small weights spread over the chip instead of piling onto tile 0.
Plan WithAllHomes(const Graph& graph, const Coster& coster, Plan plan);

// Number of weights in a home in `plan`.
int CountHomes(const Graph& graph, const Plan& plan);

// Memory repair by homes alone, for `*plan` (evaluated as `*eval`, in
// full) that does not fit: while it does not, of the weights on the peak
// tile whose home is their consumer's layout of one replica per block, the
// one whose spread home (WeightHome::spread) brings the plan closest to
// fitting (least excess, then lowest peak, then fewest cycles) is spread;
// it stops when none brings it closer. Each spread is a decision, a
// required repair (accepted, not subject to --max-decisions).
Status SpreadHomes(const Graph& graph, const Coster& coster, Plan* plan,
                   Evaluation* eval,
                   const std::function<void(fb::DecisionT)>& record);

// Promotes weights of `*plan` (evaluated as `*eval`, in full) from their
// home to resident compute layout: ranked by cycles saved per byte added on
// the busiest tile (a repeat's body weight counts its count copies: its
// twins take its ownership), each accepted if the whole program still fits and the
// plan gets faster. Every weight's choice is a decision with cycles and
// peak bytes before and after: a promotion goes to `try_apply` (an
// optimization under --max-decisions: DecisionLog::TryApply), which says
// whether it may be applied; the others to `record`.
Status PromoteWeights(const Graph& graph, const Coster& coster, Plan* plan,
                      Evaluation* eval,
                      const std::function<void(fb::DecisionT)>& record,
                      const std::function<bool(fb::DecisionT)>& try_apply);

}  // namespace tilec::plan

#endif  // TILEC_PASSES_PLAN_WEIGHT_HOMES_H_
