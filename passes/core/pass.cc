#include "passes/core/pass.h"

#include <algorithm>

#include "passes/core/pass_table.h"

namespace tilec::passes {
namespace {

// Whether a pass that makes `stage` has run on `module`.
bool HasRunMakerOf(const fb::ModuleT& module, Stage stage) {
  return std::any_of(module.log.begin(), module.log.end(),
                     [&](const auto& run) {
                       const PassInfo* info = FindPassInfo(run->pass);
                       return info && info->makes == stage;
                     });
}

// The tool whose output is the first module at `stage`: graphs come from
// import-model, which is not a pass.
std::string_view MakerOf(Stage stage) {
  for (const PassInfo* info : AllPassInfos()) {
    if (info->makes == stage) return info->name;
  }
  return "import-model";
}

}  // namespace

std::string_view StageName(Stage stage) {
  switch (stage) {
    case Stage::kGraph:
      return "an unplanned graph";
    case Stage::kPlanned:
      return "a planned graph";
    case Stage::kReduced:
      return "a lowered graph (after expand-reduce)";
    case Stage::kProgram:
      return "a device program";
  }
  return "an unknown stage";
}

Stage StageOf(const fb::ModuleT& module) {
  if (module.program) return Stage::kProgram;
  const bool owned = std::any_of(module.values.begin(), module.values.end(),
                                 [](const auto& v) { return v->ownership != nullptr; });
  if (!owned) return Stage::kGraph;
  return HasRunMakerOf(module, Stage::kReduced) ? Stage::kReduced
                                                : Stage::kPlanned;
}

Status RequireStage(const fb::ModuleT& module, std::string_view pass,
                    const std::vector<Stage>& accepted) {
  const Stage stage = StageOf(module);
  if (std::find(accepted.begin(), accepted.end(), stage) != accepted.end()) {
    return Status::Ok();
  }
  std::string wanted;
  for (size_t i = 0; i < accepted.size(); ++i) {
    if (i > 0) wanted += i + 1 == accepted.size() ? " or " : ", ";
    wanted += StageName(accepted[i]);
  }
  std::string message = std::string(pass) + " needs " + wanted + ", not " +
                        std::string(StageName(stage));
  // An input from too early a stage names the pass that would advance it.
  if (!accepted.empty() && stage < accepted.front()) {
    message += ": run " + std::string(MakerOf(accepted.front())) + " first";
  }
  return Status::BadInput(message);
}

StatusOr<bool> Pass::Run(fb::ModuleT* module) {
  TILEC_RETURN_IF_ERROR(RequireStage(*module, name(), info_.accepts));
  DecisionLog log(std::string(name()), options_.max_decisions,
                  options_.explain, options_.messages);
  StatusOr<bool> changed = Transform(module, &log);
  if (!changed.ok()) return changed.status();
  module->log.push_back(log.TakeRun(RecordedFlags()));
  return *changed;
}

}  // namespace tilec::passes
