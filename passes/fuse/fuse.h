// fuse-elementwise as a library (docs/fusion.md): forms Fused ops from
// chains of elementwise ops of a planned graph, by cost.
//
// The pass works on the plan, not only on the ops: a planned module is read
// back as its graph (the planner's Redistribute ops removed) and its plan
// (a recipe per op), so that every candidate region is priced by the
// planner's own Evaluate, redistributions around it included. For a
// producer -> consumer pair of elementwise ops it prices
//   (a) the plan as it is: separate ops, any copy between them;
//   (b) the fused op on the producer's owners (the copy moves after it);
//   (c) the fused op on the consumer's owners (the copy moves before it);
//   (d) every other layout the planner's proposal generator offers for the
//       fused op (its candidates and its neighbours' ownerships);
// and keeps the cheapest that fits tile memory, if it is cheaper than (a).
// Regions grow: a fused op is a producer like any other. A producer with
// other consumers stays for them and is recomputed in the fused op; that is
// priced like the rest. Every region formed or refused is a decision.

#ifndef TILEC_PASSES_FUSE_FUSE_H_
#define TILEC_PASSES_FUSE_FUSE_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "passes/core/pass.h"
#include "passes/core/pass_table.h"
#include "passes/plan/cost.h"
#include "passes/plan/graph.h"
#include "passes/plan/plan.h"

namespace tilec::fuse {

// A planned module as a graph and its plan.
struct PlannedGraph {
  fb::ModuleT module;  // without its Redistribute ops (consumers rewired)
  plan::Plan plan;     // the recipe of every op, by index
  std::vector<std::string> gemm_notes;  // by op index ("" if none)
};

// Reads a planned module back into graph and plan. BadInput if an op has no
// recipe or a recipe the planner cannot read.
StatusOr<PlannedGraph> Unplan(const fb::ModuleT& planned);

// The pricing the module was planned with: --gemm_dtype of its last
// plan-ownership run.
StatusOr<plan::PriceOptions> PlannedPricing(const fb::ModuleT& module);

// One candidate region: `producer`'s body runs first inside `consumer`.
struct Region {
  int producer = -1;  // op index in the PlannedGraph
  int consumer = -1;
  int slot = 0;      // the consumer's operand slot that reads the producer
  bool duplicate = false;  // the producer has other consumers and stays
};

// The elementwise producer -> consumer pairs of `graph` that one Fused op
// can run, and for the pairs it cannot, why ("" entries are fusable).
std::vector<std::pair<Region, std::string>> RegionCandidates(
    const fb::ModuleT& module);

// `module` with `region` replaced by one Fused op (id `fused_id`, origin
// the ids it was made from) at the consumer's place; the producer is
// removed unless the region duplicates it.
StatusOr<fb::ModuleT> FuseRegion(const fb::ModuleT& module,
                                 const Region& region, uint32_t fused_id);

struct FuseOptions {
  // --placements: which of the region placements may be chosen (all by
  // default; tests restrict them to show each one winning).
  bool producer_owners = true;
  bool consumer_owners = true;
  bool proposals = true;
  // Threads pricing a round's candidate regions; the output is the same
  // bytes on any count.
  int threads = 2;
  // Each placement evaluated in full only where its lower bound says it
  // could be the cheapest (docs/fusion.md); false evaluates every one (the
  // same output bytes, tested).
  bool bounds_first = true;
};

class FuseElementwisePass : public passes::Pass {
 public:
  explicit FuseElementwisePass(FuseOptions options = {},
                               passes::PassOptions common = {})
      : Pass(passes::kFuseElementwiseInfo, std::move(common)),
        options_(options) {}

 protected:
  StatusOr<bool> Transform(fb::ModuleT* module,
                           passes::DecisionLog* log) override;

 private:
  FuseOptions options_;
};

}  // namespace tilec::fuse

#endif  // TILEC_PASSES_FUSE_FUSE_H_
