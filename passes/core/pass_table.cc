#include "passes/core/pass_table.h"

namespace tilec::passes {

const PassInfo kQuantizeFp8Info{
    "quantize-fp8",
    {Stage::kGraph},
    std::nullopt,
    "quantize-fp8 [flags] [INPUT|-] [-o OUT]: make the GEMM operands of an "
    "unplanned graph FP8 (calibrated power-of-two scales, casts placed by "
    "cost)",
    /*prices=*/true,
};

// An old plan is dropped and the graph planned again: any stage will do.
const PassInfo kPlanOwnershipInfo{
    "plan-ownership",
    {Stage::kGraph, Stage::kPlanned, Stage::kReduced, Stage::kProgram},
    Stage::kPlanned,
    "plan-ownership [flags] [INPUT|-] [-o OUT]: plan ownerships and recipes "
    "for a tilec module",
    /*prices=*/true,
};

const PassInfo kFuseElementwiseInfo{
    "fuse-elementwise",
    {Stage::kPlanned},
    std::nullopt,
    "fuse-elementwise [flags] [INPUT|-] [-o OUT]: fuse chains of elementwise "
    "ops of a planned module into Fused ops where that lowers the plan's "
    "cycles and fits tile memory",
    /*prices=*/true,
};

const PassInfo kFuseResidualInfo{
    "fuse-residual",
    {Stage::kPlanned},
    std::nullopt,
    "fuse-residual [flags] [INPUT|-] [-o OUT]: fuse a residual add with the "
    "statistics of the LayerNorm it feeds (residual_moments, then "
    "normalize) where the lowered cycles say it pays",
};

const PassInfo kExpandReduceInfo{
    "expand-reduce",
    {Stage::kPlanned, Stage::kReduced},
    Stage::kReduced,
    "expand-reduce [flags] [INPUT|-] [-o OUT]: lower every reduction of a "
    "planned module (seed partials, remote partials, results, epochs)",
};

// A device program is rebuilt.
const PassInfo kEmitDeviceInfo{
    "emit-device",
    {Stage::kPlanned, Stage::kReduced, Stage::kProgram},
    Stage::kProgram,
    "emit-device [flags] [INPUT|-] [-o OUT]: build the device program of a "
    "lowered planned module (buffers, addresses, supersteps, host bindings)",
};

const std::vector<const PassInfo*>& AllPassInfos() {
  static const auto* all = new std::vector<const PassInfo*>{
      &kQuantizeFp8Info,     &kPlanOwnershipInfo, &kFuseElementwiseInfo,
      &kFuseResidualInfo,    &kExpandReduceInfo,  &kEmitDeviceInfo,
  };
  return *all;
}

const PassInfo* FindPassInfo(std::string_view name) {
  for (const PassInfo* info : AllPassInfos()) {
    if (info->name == name) return info;
  }
  return nullptr;
}

}  // namespace tilec::passes
