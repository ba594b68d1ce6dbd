#include "passes/pipeline/pipeline.h"

#include <sstream>

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

StatusOr<std::unique_ptr<Pass>> MakePass(std::string_view name,
                                         PassOptions common) {
  std::unique_ptr<Pass> pass;
  if (name == "quantize-fp8") {
    pass = std::make_unique<quantize::QuantizeFp8Pass>(
        quantize::QuantizeOptions{}, std::move(common));
  } else if (name == "plan-ownership") {
    pass = std::make_unique<plan::PlanOwnershipPass>(plan::PlannerOptions{},
                                                     std::move(common));
  } else if (name == "fuse-elementwise") {
    pass = std::make_unique<fuse::FuseElementwisePass>(fuse::FuseOptions{},
                                                       std::move(common));
  } else if (name == "fuse-residual") {
    pass = std::make_unique<fuse::FuseResidualPass>(std::move(common));
  } else if (name == "expand-reduce") {
    pass = std::make_unique<lower::ExpandReducePass>(
        lower::ExpandReduceOptions{}, std::move(common));
  } else if (name == "emit-device") {
    pass = std::make_unique<lower::EmitDevicePass>(lower::EmitOptions{},
                                                   std::move(common));
  } else {
    return Status::BadInput("unknown pass '" + std::string(name) + "'");
  }
  return pass;
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
