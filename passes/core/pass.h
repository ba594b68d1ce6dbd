// One shape for every transforming pass, in the spirit of XLA's
// HloModulePass: what identifies it (a PassInfo of passes/core/pass_table.h:
// its name, the stages of input it accepts) and Run(module) -> whether it
// changed anything, or an error. The options every pass shares
// (--max-decisions, --explain, the recorded flags) and its decision log come
// from here. docs/workflow.md lists the steps of adding a pass.

#ifndef TILEC_PASSES_CORE_PASS_H_
#define TILEC_PASSES_CORE_PASS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "passes/core/decisions.h"

namespace tilec::passes {

// How far down the pipeline a module is, from what it holds.
enum class Stage {
  kGraph,    // values and ops, no ownerships (import-model)
  kPlanned,  // every value owned, every op a recipe (plan-ownership)
  kReduced,  // reductions explicit (expand-reduce)
  kProgram,  // a device program (emit-device)
};

// "an unplanned graph", "a planned graph", ...
std::string_view StageName(Stage stage);
// A module with some values owned and others not is reported as planned:
// the passes that need ownerships name the value that lacks one.
Stage StageOf(const fb::ModuleT& module);

// What identifies a pass; one entry per pass in passes/core/pass_table.cc.
struct PassInfo {
  std::string_view name;  // the tool's name, also the pass run's name
  std::vector<Stage> accepts;  // the stages this pass takes as input
  // The stage whose first modules this pass makes (the stage check's "run
  // it first"); none for a pass that keeps its input's stage.
  std::optional<Stage> makes;
  std::string_view usage;  // the tool's usage line
  // Whether it prices plans with the planner's Coster, and so takes and
  // saves --price_cache (passes/plan/price_cache.h).
  bool prices = false;
};

// The options every pass shares.
struct PassOptions {
  // Apply only the first N transforming decisions (like LLVM's
  // -opt-bisect-limit); -1: no limit.
  int64_t max_decisions = -1;
  ExplainFilter explain;  // which decisions to print as they are made
  // Where --explain output and progress go (stderr in the tools); null:
  // nowhere.
  std::ostream* messages = nullptr;
  // The flags that decided the output, recorded in the pass run.
  std::vector<std::string> flags;
  // The file the module was read from ("-": stdin); a pass that reads files
  // named relative to it (sidecars) resolves them from its directory.
  std::string input = "-";
  // --price_cache: the prices an earlier pass saved (the file's bytes;
  // empty: none) and the name messages give them; and where a pass that
  // prices hands the prices it holds at the end (null: nowhere). Passes
  // take and save them through plan::TakeSavedPrices and
  // plan::SavePassPrices (passes/plan/price_cache.h); no output depends on
  // them.
  std::string saved_prices;
  std::string price_cache_name;
  std::function<Status(std::string bytes)> save_prices;
};

class Pass {
 public:
  Pass(const PassInfo& info, PassOptions options)
      : info_(info), options_(std::move(options)) {}
  virtual ~Pass() = default;

  const PassInfo& info() const { return info_; }
  // e.g. "expand-reduce"
  std::string_view name() const { return info_.name; }

  // Checks the input's stage (BadInput naming what it is and which pass
  // must run first), runs the pass with a fresh decision log and appends
  // that log to module->log as this pass's run. Returns whether the module
  // changed beyond the log.
  StatusOr<bool> Run(fb::ModuleT* module);

  const PassOptions& options() const { return options_; }

 protected:
  // The pass proper: transforms `module`, logging every decision in `log`.
  virtual StatusOr<bool> Transform(fb::ModuleT* module, DecisionLog* log) = 0;
  // The flags recorded in the pass run (default: options().flags).
  virtual std::vector<std::string> RecordedFlags() const {
    return options_.flags;
  }

 private:
  const PassInfo& info_;
  PassOptions options_;
};

// BadInput unless `module` is at one of `accepted`, e.g. "expand-reduce
// needs a planned graph, not an unplanned graph: run plan-ownership first".
Status RequireStage(const fb::ModuleT& module, std::string_view pass,
                    const std::vector<Stage>& accepted);

}  // namespace tilec::passes

#endif  // TILEC_PASSES_CORE_PASS_H_
