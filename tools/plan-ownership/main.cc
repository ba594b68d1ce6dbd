// plan-ownership: gives every value an ownership over tiles and every op a
// recipe, inserts redistributions, and searches for a cheaper plan
// (docs/planner.md). This file reads the --recipe, --resume, --initial_plan
// and --target files and writes --checkpoint; the planner library reads no
// files.

#include <gflags/gflags.h>

#include <string>

#include "formats/ir.h"
#include "passes/plan/planner.h"
#include "passes/plan/search.h"
#include "tools/common/pass_tool.h"
#include "tools/common/tool.h"

namespace {

const tilec::plan::PlannerOptions kDefaults;
const tilec::plan::SearchOptions kSearchDefaults;

}  // namespace

DEFINE_string(target, "",
              "Target to plan for: a preset (ipu21, tiny) or a JSON path. "
              "Default: the module's own target.");
DEFINE_uint64(seed, kSearchDefaults.seed,
              "Seed of the search's random choices.");
DEFINE_int64(attempts, kDefaults.attempts,
             "Proposals to evaluate (on --resume: additional ones; 0 keeps "
             "the initial or saved plan).");
DEFINE_int32(proposals_per_op, kSearchDefaults.proposals_per_op,
             "Alternatives offered per op for each incumbent plan.");
DEFINE_string(gemm_dtype, "",
              "Price GEMM inputs in this dtype: fp8 (E4M3), f16, f32 or "
              "native (the operands' own). A what-if for unquantized graphs "
              "that the default pipeline never uses: quantize-fp8 puts FP8 "
              "in the graph, and the planner prices the graph's dtypes.");
DEFINE_string(recipe, "",
              "File pinning recipes: lines 'op ID: RECIPE', e.g. "
              "'op 1: gemm m=9 k=6 n=27 staging=complete' (add steps=S "
              "to run its rows in S serial steps), "
              "'op 2: elementwise blocked(729x2)'.");
DEFINE_int32(attention_steps, 1,
             "Run every self-attention in this many image steps (each "
             "step's scores and probabilities one group of images; must "
             "divide the batch). Unset: 1, or the fewest steps that fit "
             "when no plan fits without.");
DEFINE_string(checkpoint, "",
              "Save the search state to this file (atomically) every "
              "--checkpoint_every attempts and at the end.");
DEFINE_int64(checkpoint_every, kDefaults.checkpoint_every,
             "Attempts between checkpoints.");
DEFINE_string(resume, "",
              "Continue the search saved in this checkpoint (the input must "
              "be the same graph).");
DEFINE_string(initial_plan, "",
              "Start from the initial plan in this file (quantize-fp8 "
              "--save_initial_plan of the same build) rather than planning "
              "it again, where it was made for this graph with this run's "
              "parameters; else plan it here. The same output either way.");

namespace tilec::tools {
namespace {

bool Given(const char* flag) {
  return !gflags::GetCommandLineFlagInfoOrDie(flag).is_default;
}

// The files the flags name, read here so the planner reads none.
Status ReadFlagFiles(plan::PlannerOptions* options) {
  if (!FLAGS_target.empty()) {
    options->target.emplace();
    TILEC_RETURN_IF_ERROR(ir::LoadTarget(FLAGS_target, &*options->target));
  }
  if (!FLAGS_recipe.empty()) {
    options->recipe_name = ir::DisplayName(FLAGS_recipe);
    TILEC_RETURN_IF_ERROR(ir::ReadFile(FLAGS_recipe, &options->recipe_text));
  }
  if (!FLAGS_resume.empty()) {
    options->resume_name = ir::DisplayName(FLAGS_resume);
    options->resume.emplace();
    TILEC_RETURN_IF_ERROR(ir::ReadModule(FLAGS_resume, &*options->resume));
  }
  if (!FLAGS_initial_plan.empty()) {
    options->initial_plan_name = ir::DisplayName(FLAGS_initial_plan);
    options->initial_plan.emplace();
    TILEC_RETURN_IF_ERROR(
        ir::ReadModule(FLAGS_initial_plan, &*options->initial_plan));
  }
  if (!FLAGS_checkpoint.empty()) {
    options->save_checkpoint = [](const fb::ModuleT& checkpoint) {
      return ir::WriteModule(checkpoint, "plan-ownership", FLAGS_checkpoint);
    };
  }
  return Status::Ok();
}

Status CheckFlags() {
  if (FLAGS_attempts < 0) {
    return Status::BadInput("--attempts=" + std::to_string(FLAGS_attempts) +
                            ": must not be negative");
  }
  if (FLAGS_proposals_per_op < 1) {
    return Status::BadInput("--proposals_per_op=" +
                            std::to_string(FLAGS_proposals_per_op) +
                            ": must be at least 1");
  }
  if (FLAGS_checkpoint_every < 1) {
    return Status::BadInput("--checkpoint_every=" +
                            std::to_string(FLAGS_checkpoint_every) +
                            ": must be at least 1");
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<passes::Pass>> MakePlanner(
    passes::PassOptions common) {
  TILEC_RETURN_IF_ERROR(CheckFlags());
  // -o may replace the input and --checkpoint the --resume file: the same
  // kind of file, rewritten in place.
  TILEC_RETURN_IF_ERROR(CheckOutputs(
      {{"the input", common.input},
       {"--recipe", FLAGS_recipe},
       {"--target", FLAGS_target}},
      {{"--checkpoint", FLAGS_checkpoint}}));
  TILEC_RETURN_IF_ERROR(
      CheckOutputs({{"--recipe", FLAGS_recipe},
                    {"--resume", FLAGS_resume},
                    {"--initial_plan", FLAGS_initial_plan},
                    {"--target", FLAGS_target}},
                   {{"-o", FLAGS_o}, {"--checkpoint", FLAGS_checkpoint}}));
  plan::PlannerOptions options;
  if (Given("seed")) options.seed = FLAGS_seed;
  if (Given("proposals_per_op")) {
    options.proposals_per_op = FLAGS_proposals_per_op;
  }
  if (Given("gemm_dtype")) options.gemm_dtype = FLAGS_gemm_dtype;
  if (Given("attention_steps")) options.attention_steps = FLAGS_attention_steps;
  options.attempts = FLAGS_attempts;
  options.checkpoint_every = FLAGS_checkpoint_every;
  TILEC_RETURN_IF_ERROR(ReadFlagFiles(&options));
  return std::unique_ptr<passes::Pass>(
      new plan::PlanOwnershipPass(std::move(options), std::move(common)));
}

}  // namespace
}  // namespace tilec::tools

int main(int argc, char** argv) {
  return tilec::tools::PassToolMain(
      argc, argv, tilec::passes::kPlanOwnershipInfo,
      tilec::tools::MakePlanner, tilec::tools::CheckPlannable);
}
