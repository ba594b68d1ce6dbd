// inspect-gemms: every GEMM of a module against the best the target's
// formulas allow (passes/inspect/gemms.h, docs/lowering.md "The bound").

#include <gflags/gflags.h>

#include "formats/ir.h"
#include "passes/inspect/gemms.h"
#include "passes/lower/verify_planned.h"
#include "tools/common/tool.h"

DEFINE_int32(threads, 2,
             "Host threads for the simulator's timing run (results do not "
             "depend on it).");

namespace tilec::tools {
namespace {

Status Run(const std::vector<std::string>& args) {
  std::string input;
  TILEC_RETURN_IF_ERROR(SingleInput(args, &input));
  TILEC_RETURN_IF_ERROR(CheckOutputs({{"the input", input}}, {{"-o", FLAGS_o}}));
  if (FLAGS_threads < 1 || FLAGS_threads > 256) {
    return Status::BadInput("--threads=" + std::to_string(FLAGS_threads) +
                            ": expected 1 to 256");
  }
  fb::ModuleT module;
  TILEC_RETURN_IF_ERROR(ir::ReadModule(input, &module));
  TILEC_RETURN_IF_ERROR(
      lower::VerifyPlanned(module).WithContext(ir::DisplayName(input)));
  StatusOr<std::vector<inspect::GemmReport>> gemms =
      inspect::InspectGemms(module, FLAGS_threads);
  if (!gemms.ok()) return gemms.status().WithContext(ir::DisplayName(input));
  return ir::WriteFileAtomically(FLAGS_o, inspect::GemmReportText(*gemms));
}

}  // namespace
}  // namespace tilec::tools

int main(int argc, char** argv) {
  auto args = tilec::tools::InitTool(
      argc, argv,
      "inspect-gemms [FILE|-] [-o OUT]: every GEMM of a planned module or "
      "device program against the best cycles the target's formulas allow "
      "(kernel, operand delivery, partial reduction) over all grids");
  return tilec::tools::RunAndFinish(
      [&] { return tilec::tools::Run(args); });
}
