// emit-device: turns a lowered planned module into a device program
// (passes/lower/emit_device.h, docs/lowering.md, docs/device-program.md).

#include <gflags/gflags.h>

#include "formats/ir.h"
#include "passes/lower/emit_device.h"
#include "tools/common/tool.h"

DEFINE_bool(share_supersteps, true,
            "Let independent work of different ops share supersteps (undone "
            "automatically when memory does not fit).");
DEFINE_bool(alias_in_place, true,
            "Use an operand's buffer in place when a tile already holds "
            "exactly the data an op needs.");
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
  lower::EmitOptions options;
  options.share_supersteps = FLAGS_share_supersteps;
  options.alias_in_place = FLAGS_alias_in_place;
  options.max_decisions = FLAGS_max_decisions;
  options.explain = FLAGS_explain;
  options.flags = flags;
  TILEC_RETURN_IF_ERROR(lower::EmitDevice(&module, options)
                            .WithContext(ir::DisplayName(input)));
  return ir::WriteModule(module, ToolName(), FLAGS_o);
}

}  // namespace
}  // namespace tilec::tools

int main(int argc, char** argv) {
  auto args = tilec::tools::InitTool(
      argc, argv,
      "emit-device [flags] [INPUT|-] [-o OUT]: build the device program of a "
      "lowered planned module (buffers, addresses, supersteps, host "
      "bindings)");
  return tilec::tools::Finish(
      tilec::tools::Run(args, tilec::tools::GivenFlags()));
}
