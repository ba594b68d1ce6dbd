// The default pipeline (passes/pipeline/PIPELINE, built in) and every pass
// by its tool name, so that tests run the passes in the one order the
// scripts use.

#ifndef TILEC_PASSES_PIPELINE_PIPELINE_H_
#define TILEC_PASSES_PIPELINE_PIPELINE_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "passes/core/pass.h"

namespace tilec::passes {

// The pass names of passes/pipeline/PIPELINE, in order.
const std::vector<std::string>& DefaultPipeline();

// The pass `name` with its default options; BadInput for an unknown name.
StatusOr<std::unique_ptr<Pass>> MakePass(std::string_view name,
                                         PassOptions common = {});

// Runs the default pipeline on `module`. `custom` may supply a pass of its
// own for a name (e.g. a planner with pinned recipes); it returns null to
// take the default. The first failure is returned with the pass's name.
using PassFactory = std::function<std::unique_ptr<Pass>(std::string_view)>;
Status RunPipeline(fb::ModuleT* module, const PassFactory& custom = nullptr);

}  // namespace tilec::passes

#endif  // TILEC_PASSES_PIPELINE_PIPELINE_H_
