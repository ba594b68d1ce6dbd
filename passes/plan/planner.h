// plan-ownership as a library: what tools/plan-ownership/main.cc calls.
//
// PlanOwnership replaces `module`'s graph with the planned graph: an
// ownership on every value, a recipe and an estimate on every op, explicit
// Redistribute ops where owners differ (docs/planning.md), and a PassRun
// "plan-ownership" in the log with every decision. docs/planner.md
// describes the search and the cost model.

#ifndef TILEC_PASSES_PLAN_PLANNER_H_
#define TILEC_PASSES_PLAN_PLANNER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "passes/plan/cost.h"
#include "passes/plan/graph.h"

namespace tilec::plan {

struct PlannerOptions {
  // A target preset or JSON path replacing the module's own ("": keep it).
  std::string target;
  // Search parameters. Unset ones take their defaults, or on --resume the
  // checkpoint's values (a set value that differs is an error).
  std::optional<uint64_t> seed;           // default 1
  std::optional<int> proposals_per_op;    // default 4
  std::optional<std::string> gemm_dtype;  // "fp8" (E4M3), "f16", "f32"
  std::optional<int64_t> max_decisions;   // default: no limit
  int64_t attempts =
      64;  // proposals to evaluate in this run (additional on resume)
  std::string recipe_path;      // --recipe
  std::string checkpoint_path;  // --checkpoint
  std::string resume_path;      // --resume
  int64_t checkpoint_every = 16;
  // "" nothing, "all" every decision as it is made, an op id: the
  // alternatives considered for that op with their costs.
  std::string explain;
  // Where explanations and progress go (stderr in the tool); null: nowhere.
  std::ostream* messages = nullptr;
};

// Parses a --recipe file: lines "op ID: RECIPE" (Recipe::Text() syntax),
// '#' comments and blank lines. Errors are "FILE:LINE: problem" (exit 2).
// `name` is the file's display name.
StatusOr<std::map<int, Recipe>> ParseRecipeFile(const std::string& text,
                                                const std::string& name,
                                                const Graph& graph,
                                                const Coster& coster);

// Plans `module` in place. Status codes: 2 bad input or flags (bad recipe
// file, checkpoint that does not match), 3 valid but cannot be planned (no
// plan fits tile memory, an op without a recipe), 1 internal.
Status PlanOwnership(const PlannerOptions& options, fb::ModuleT* module);

}  // namespace tilec::plan

#endif  // TILEC_PASSES_PLAN_PLANNER_H_
