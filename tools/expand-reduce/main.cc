// expand-reduce: makes every reduction of a planned module explicit
// (passes/lower/expand_reduce.h, docs/lowering.md).

#include <gflags/gflags.h>

#include "formats/ir.h"
#include "passes/lower/expand_reduce.h"
#include "tools/common/tool.h"

DEFINE_int32(partials_per_epoch, 0,
             "Remote partials received per exchange phase: 0 decides (all at "
             "once unless a tile's memory does not fit), N caps it at N.");
DEFINE_bool(seed_in_place, true,
            "Allow reading seed partials where the GEMM wrote them.");
DEFINE_bool(direct_final_write, true,
            "Allow reducing straight into the output buffer.");
DEFINE_int64(max_decisions, -1,
             "Apply only the first N transforming decisions (like LLVM's "
             "-opt-bisect-limit); -1: no limit.");
DEFINE_bool(explain, false, "Print every decision with its numbers on stderr.");

namespace tilec::tools {
namespace {

Status Run(const std::vector<std::string>& args,
           const std::vector<std::string>& flags) {
  std::string input;
  TILEC_RETURN_IF_ERROR(SingleInput(args, &input));
  fb::ModuleT module;
  TILEC_RETURN_IF_ERROR(ir::ReadModule(input, &module));
  lower::ExpandReduceOptions options;
  options.partials_per_epoch = FLAGS_partials_per_epoch;
  options.seed_in_place = FLAGS_seed_in_place;
  options.direct_final_write = FLAGS_direct_final_write;
  options.max_decisions = FLAGS_max_decisions;
  options.explain = FLAGS_explain;
  options.flags = flags;
  if (options.partials_per_epoch < 0) {
    return Status::BadInput("--partials_per_epoch must be >= 0");
  }
  TILEC_RETURN_IF_ERROR(lower::ExpandReduce(&module, options)
                            .WithContext(ir::DisplayName(input)));
  return ir::WriteModule(module, ToolName(), FLAGS_o);
}

}  // namespace
}  // namespace tilec::tools

int main(int argc, char** argv) {
  auto args = tilec::tools::InitTool(
      argc, argv,
      "expand-reduce [flags] [INPUT|-] [-o OUT]: lower every reduction of a "
      "planned module (seed partials, remote partials, results, epochs)");
  return tilec::tools::Finish(
      tilec::tools::Run(args, tilec::tools::GivenFlags()));
}
