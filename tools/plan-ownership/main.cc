// plan-ownership: gives every value an ownership over tiles and every op a
// recipe, inserts redistributions, and searches for a cheaper plan
// (docs/planner.md).

#include <gflags/gflags.h>

#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "formats/ir.h"
#include "passes/plan/planner.h"
#include "tools/common/tool.h"

DEFINE_string(target, "",
              "Target to plan for: a preset (ipu21, tiny) or a JSON path. "
              "Default: the module's own target.");
DEFINE_uint64(seed, 1, "Seed of the search's random choices.");
DEFINE_int64(attempts, 64,
             "Proposals to evaluate (on --resume: additional ones; 0 keeps "
             "the initial or saved plan).");
DEFINE_int32(proposals_per_op, 4,
             "Alternatives offered per op for each incumbent plan.");
DEFINE_int64(max_decisions, -1,
             "Apply only the first N accepted changes of the search (like "
             "LLVM's -opt-bisect-limit); -1: no limit.");
DEFINE_string(gemm_dtype, "",
              "Price GEMM inputs in this dtype: fp8 (E4M3), f16, f32 or "
              "native (the operands' own). Emulates quantize-fp8.");
DEFINE_string(recipe, "",
              "File pinning recipes: lines 'op ID: RECIPE', e.g. "
              "'op 1: gemm m=9 k=6 n=27 staging=complete', "
              "'op 2: elementwise blocked(729x2)'.");
DEFINE_string(checkpoint, "",
              "Save the search state to this file (atomically) every "
              "--checkpoint_every attempts and at the end.");
DEFINE_int64(checkpoint_every, 16, "Attempts between checkpoints.");
DEFINE_string(resume, "",
              "Continue the search saved in this checkpoint (the input must "
              "be the same graph).");
DEFINE_string(explain, "",
              "'all' (or bare --explain): print every decision on stderr; "
              "an op id: print the alternatives considered for that op.");

namespace tilec::tools {
namespace {

bool Given(const char* flag) {
  return !gflags::GetCommandLineFlagInfoOrDie(flag).is_default;
}

Status Run(const std::vector<std::string>& args) {
  std::string input;
  TILEC_RETURN_IF_ERROR(SingleInput(args, &input));
  fb::ModuleT module;
  TILEC_RETURN_IF_ERROR(ir::ReadModule(input, &module));
  plan::PlannerOptions options;
  options.target = FLAGS_target;
  if (Given("seed")) options.seed = FLAGS_seed;
  if (Given("proposals_per_op"))
    options.proposals_per_op = FLAGS_proposals_per_op;
  if (Given("gemm_dtype")) options.gemm_dtype = FLAGS_gemm_dtype;
  if (Given("max_decisions") && FLAGS_max_decisions >= 0) {
    options.max_decisions = FLAGS_max_decisions;
  }
  options.attempts = FLAGS_attempts;
  options.recipe_path = FLAGS_recipe;
  options.checkpoint_path = FLAGS_checkpoint;
  options.resume_path = FLAGS_resume;
  options.checkpoint_every = FLAGS_checkpoint_every;
  options.explain = FLAGS_explain;
  options.messages = &std::cerr;
  TILEC_RETURN_IF_ERROR(plan::PlanOwnership(options, &module));
  return ir::WriteModule(module, ToolName(), FLAGS_o);
}

}  // namespace
}  // namespace tilec::tools

int main(int argc, char** argv) {
  // A bare --explain means every decision (--explain=OP names one op).
  std::vector<std::string> storage(argv, argv + argc);
  for (std::string& arg : storage) {
    if (arg == "--explain" || arg == "-explain") arg = "--explain=all";
  }
  std::vector<char*> rewritten;
  for (std::string& arg : storage) rewritten.push_back(arg.data());
  rewritten.push_back(nullptr);
  auto args = tilec::tools::InitTool(
      argc, rewritten.data(),
      "plan-ownership [flags] [INPUT|-] [-o OUT]: plan ownerships and "
      "recipes for a tilec module");
  return tilec::tools::Finish(tilec::tools::Run(args));
}
