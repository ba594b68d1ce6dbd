#include "passes/pipeline/pipeline.h"

#include <sstream>

#include "passes/core/pass_table.h"
#include "passes/fuse/fuse.h"
#include "passes/fuse/residual.h"
#include "passes/lower/emit_device.h"
#include "passes/lower/expand_reduce.h"
#include "passes/plan/planner.h"
#include "passes/quantize/quantize.h"

namespace tilec::passes {

extern const char kPipelineText[];

const std::vector<std::string>& DefaultPipeline() {
  static const auto* names = [] {
    auto* list = new std::vector<std::string>();
    std::istringstream in(kPipelineText);
    std::string line;
    while (std::getline(in, line)) {
      const size_t begin = line.find_first_not_of(" \t");
      if (begin == std::string::npos || line[begin] == '#') continue;
      list->push_back(line.substr(begin, line.find_last_not_of(" \t") + 1 - begin));
    }
    return list;
  }();
  return *names;
}

namespace {

// A pass with its options' defaults, for a registry entry.
template <typename PassType, typename Options>
std::unique_ptr<Pass> WithDefaults(PassOptions common) {
  return std::make_unique<PassType>(Options{}, std::move(common));
}

struct Registered {
  const PassInfo& info;
  std::unique_ptr<Pass> (*make)(PassOptions common);
};

// Every pass of passes/core/pass_table.h with its maker.
const std::vector<Registered>& Registry() {
  static const auto* registry = new std::vector<Registered>{
      {kQuantizeFp8Info,
       WithDefaults<quantize::QuantizeFp8Pass, quantize::QuantizeOptions>},
      {kPlanOwnershipInfo,
       WithDefaults<plan::PlanOwnershipPass, plan::PlannerOptions>},
      {kFuseElementwiseInfo,
       WithDefaults<fuse::FuseElementwisePass, fuse::FuseOptions>},
      {kFuseResidualInfo,
       [](PassOptions common) -> std::unique_ptr<Pass> {
         return std::make_unique<fuse::FuseResidualPass>(std::move(common));
       }},
      {kExpandReduceInfo,
       WithDefaults<lower::ExpandReducePass, lower::ExpandReduceOptions>},
      {kEmitDeviceInfo, WithDefaults<lower::EmitDevicePass, lower::EmitOptions>},
  };
  return *registry;
}

}  // namespace

StatusOr<std::unique_ptr<Pass>> MakePass(std::string_view name,
                                         PassOptions common) {
  for (const Registered& entry : Registry()) {
    if (entry.info.name == name) return entry.make(std::move(common));
  }
  return Status::BadInput("unknown pass '" + std::string(name) + "'");
}

Status RunPipeline(fb::ModuleT* module, const PassFactory& custom) {
  for (const std::string& name : DefaultPipeline()) {
    std::unique_ptr<Pass> pass = custom ? custom(name) : nullptr;
    if (!pass) {
      StatusOr<std::unique_ptr<Pass>> made = MakePass(name);
      if (!made.ok()) return made.status();
      pass = std::move(*made);
    }
    StatusOr<bool> ran = pass->Run(module);
    if (!ran.ok()) return ran.status().WithContext(name);
  }
  return Status::Ok();
}

}  // namespace tilec::passes
