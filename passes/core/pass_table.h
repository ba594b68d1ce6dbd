// What identifies each transforming pass, declared once: its name (the
// tool's and its pass run's), the stages it takes, the stage its output is
// first at, and its tool's usage line. The pass classes, the stage check
// (passes/core/pass.h), the pass registry (passes/pipeline) and the tools
// all read these entries; passes/pipeline/PIPELINE alone says the order.

#ifndef TILEC_PASSES_CORE_PASS_TABLE_H_
#define TILEC_PASSES_CORE_PASS_TABLE_H_

#include <string_view>
#include <vector>

#include "passes/core/pass.h"

namespace tilec::passes {

extern const PassInfo kQuantizeFp8Info;
extern const PassInfo kPlanOwnershipInfo;
extern const PassInfo kFuseElementwiseInfo;
extern const PassInfo kFuseResidualInfo;
extern const PassInfo kExpandReduceInfo;
extern const PassInfo kEmitDeviceInfo;

// Every entry above.
const std::vector<const PassInfo*>& AllPassInfos();

// The pass named `name`, or null.
const PassInfo* FindPassInfo(std::string_view name);

}  // namespace tilec::passes

#endif  // TILEC_PASSES_CORE_PASS_TABLE_H_
