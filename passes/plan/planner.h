// plan-ownership as a library: what tools/plan-ownership/main.cc calls.
//
// PlanOwnershipPass replaces a module's plan with the planned graph: an
// ownership on every value, a recipe and an estimate on every op, explicit
// Redistribute ops where owners differ (docs/planning.md), and a pass run
// "plan-ownership" in the log with every decision. docs/planner.md
// describes the search and the cost model. The library reads and writes no
// files: the tool reads --recipe and --resume and writes --checkpoint.

#ifndef TILEC_PASSES_PLAN_PLANNER_H_
#define TILEC_PASSES_PLAN_PLANNER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "passes/core/pass.h"
#include "passes/core/pass_table.h"
#include "passes/plan/cost.h"
#include "passes/plan/graph.h"

namespace tilec::plan {

struct PlannerOptions {
  // Replaces the module's own target (--target).
  std::optional<fb::TargetT> target;
  // Search parameters. Unset ones take their defaults, or on resume the
  // checkpoint's values (a set value that differs is an error); so does
  // PassOptions::max_decisions (-1: unset).
  std::optional<uint64_t> seed;           // default 1
  std::optional<int> proposals_per_op;    // default 4
  std::optional<std::string> gemm_dtype;  // "fp8" (E4M3), "f16", "f32"
  // Self-attention in this many image steps (attention_steps.h); unset:
  // in steps only when no plan fits without them, the fewest that fit.
  std::optional<int> attention_steps;
  // Proposals to evaluate in this run (additional ones on resume).
  int64_t attempts = 64;
  // --recipe: the text of a recipe file and the name its errors cite.
  std::string recipe_text;
  std::string recipe_name;
  // --resume: a checkpoint module written through save_checkpoint, and the
  // name its errors cite.
  std::optional<fb::ModuleT> resume;
  std::string resume_name;
  // --checkpoint: receives the checkpoint module every checkpoint_every
  // attempts and at the end (the tool writes it atomically).
  std::function<Status(const fb::ModuleT&)> save_checkpoint;
  int64_t checkpoint_every = 16;
  // --initial_plan: a checkpoint of no attempts (InitialPlanCheckpoint,
  // written by quantize-fp8 --save_initial_plan), and the name messages
  // cite. Taken instead of planning the initial plan again where it was
  // made for this graph with this run's parameters; else planned here, with
  // a message saying why. The output is the same bytes either way, as long
  // as the file comes from the same build (the plan is not checked for
  // being the one this build's greedy plan would make).
  std::optional<fb::ModuleT> initial_plan;
  std::string initial_plan_name;
};

// The initial plan a search made (Search::Initialize): its state and the
// decisions that made it.
struct InitialPlan {
  fb::SearchCheckpointT state;
  std::vector<std::unique_ptr<fb::DecisionT>> decisions;
};

// What `plan-ownership --attempts=0 --checkpoint=FILE` saves for `module`
// with every parameter at its default, given the initial plan its search
// makes: so that a pass that planned the same graph by the same greedy
// plan (quantize-fp8's decisions by cost) hands it to plan-ownership
// (--initial_plan) rather than have it planned twice.
fb::ModuleT InitialPlanCheckpoint(const fb::ModuleT& module,
                                  const InitialPlan& plan);

// --gemm_dtype's text ("fp8", "fp8e4m3", "f16", "f32", "native" or empty)
// as the dtype GEMM inputs are priced in (none for native).
StatusOr<std::optional<fb::DType>> ParseGemmDType(
    const std::optional<std::string>& text);

// Parses a --recipe file: lines "op ID: RECIPE" (Recipe::Text() syntax),
// '#' comments and blank lines. Errors are "FILE:LINE: problem" (exit 2).
// `name` is the file's display name.
StatusOr<std::map<int, Recipe>> ParseRecipeFile(const std::string& text,
                                                const std::string& name,
                                                const Graph& graph,
                                                const Coster& coster);

// Status codes of Run: 2 bad input or flags (bad recipe file, checkpoint
// that does not match), 3 valid but cannot be planned (no plan fits tile
// memory, an op without a recipe), 1 internal. Takes a module at any stage:
// an old plan is dropped and the graph planned again. PassOptions::explain
// with an op id also prints the alternatives considered for that op.
class PlanOwnershipPass : public passes::Pass {
 public:
  explicit PlanOwnershipPass(PlannerOptions options = {},
                             passes::PassOptions common = {})
      : Pass(passes::kPlanOwnershipInfo, std::move(common)),
        options_(std::move(options)) {}

 protected:
  StatusOr<bool> Transform(fb::ModuleT* module,
                           passes::DecisionLog* log) override;
  // The parameters that decided the plan (not paths or the attempt
  // count), as resolved against a checkpoint.
  std::vector<std::string> RecordedFlags() const override {
    return recorded_flags_;
  }

 private:
  PlannerOptions options_;
  std::vector<std::string> recorded_flags_;
};

}  // namespace tilec::plan

#endif  // TILEC_PASSES_PLAN_PLANNER_H_
