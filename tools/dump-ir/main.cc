// dump-ir: prints any stage's IR in the stable text form, or as JSON.

#include <gflags/gflags.h>

#include "formats/ir.h"
#include "formats/print.h"
#include "tools/common/tool.h"

DEFINE_bool(json, false, "Print JSON through the schema instead of text.");
DEFINE_bool(program, false,
            "Print every buffer, compute and transfer of a device program "
            "(default: per-superstep totals).");

namespace tilec::tools {
namespace {

Status Run(const std::vector<std::string>& args) {
  std::string path;
  TILEC_RETURN_IF_ERROR(SingleInput(args, &path));
  TILEC_RETURN_IF_ERROR(CheckOutputs({{"the input", path}}, {{"-o", FLAGS_o}}));
  fb::ModuleT module;
  std::string text;
  if (FLAGS_json) {
    std::string bytes;
    TILEC_RETURN_IF_ERROR(ir::ReadFile(path, &bytes));
    // Parse (and verify) first: JSON of a corrupt file is no help.
    TILEC_RETURN_IF_ERROR(
        ir::ParseModule(bytes, ir::DisplayName(path), &module));
    TILEC_RETURN_IF_ERROR(ir::ModuleToJson(bytes, &text));
  } else {
    TILEC_RETURN_IF_ERROR(ir::ReadModule(path, &module));
    ir::PrintOptions options;
    options.program_detail = FLAGS_program;
    text = ir::PrintModule(module, options);
  }
  return ir::WriteFileAtomically(FLAGS_o, text);
}

}  // namespace
}  // namespace tilec::tools

int main(int argc, char** argv) {
  auto args = tilec::tools::InitTool(
      argc, argv,
      "dump-ir [FILE|-] [-o OUT]: print tilec IR as stable text (or --json)");
  return tilec::tools::RunAndFinish(
      [&] { return tilec::tools::Run(args); });
}
