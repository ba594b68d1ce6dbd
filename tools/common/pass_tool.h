#ifndef TILEC_TOOLS_COMMON_PASS_TOOL_H_
#define TILEC_TOOLS_COMMON_PASS_TOOL_H_

// The main of every transforming pass's tool: the flags all passes share
// (--max-decisions, --explain), reading the input module, running the pass
// (passes/core/pass.h) and writing the result. A pass tool's main.cc
// defines its own flags (their defaults those of the pass's options struct)
// and turns them into the pass; its usage line is the pass's PassInfo's
// (passes/core/pass_table.h):
//
//   int main(int argc, char** argv) {
//     return tilec::tools::PassToolMain(argc, argv, passes::kFooInfo,
//         [](tilec::passes::PassOptions common) { return ...; });
//   }

#include <functional>
#include <memory>

#include "formats/status.h"
#include "passes/core/pass.h"
#include "passes/core/pass_table.h"

namespace tilec::tools {

using PassMaker = std::function<StatusOr<std::unique_ptr<passes::Pass>>(
    passes::PassOptions common)>;
// Checks the input module before the pass runs (the passes after
// plan-ownership give lower::VerifyPlanned); its error is bad input, named
// with the input file.
using InputCheck = std::function<Status(const fb::ModuleT& module)>;

// The InputCheck of the passes that run the planner's search (quantize-fp8
// prices casts with it, plan-ownership): at most kMaxPlannedOps ops, else
// Infeasible saying why. The greedy search re-prices the whole prefix for
// every op and candidate, quadratic in ops (1,000 ops: 23 s in quantize-fp8,
// minutes in plan-ownership); the bound keeps a run within minutes. The
// largest real graph, so400m unrolled, has 453 ops.
inline constexpr size_t kMaxPlannedOps = 2048;
Status CheckPlannable(const fb::ModuleT& module);

int PassToolMain(int argc, char** argv, const passes::PassInfo& pass,
                 const PassMaker& make, const InputCheck& check = nullptr);

}  // namespace tilec::tools

#endif  // TILEC_TOOLS_COMMON_PASS_TOOL_H_
