#include "tools/common/pass_tool.h"

#include <gflags/gflags.h>

#include <filesystem>
#include <iostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "formats/ir.h"
#include "tools/common/tool.h"

DEFINE_int64(max_decisions, -1,
             "Apply only the first N transforming decisions of this pass "
             "(like LLVM's -opt-bisect-limit; scripts/bisect.sh drives it); "
             "-1: no limit.");
DEFINE_string(price_cache, "",
              "A file of the planner's prices: a pass that prices "
              "(quantize-fp8, plan-ownership, fuse-elementwise) takes those "
              "there, if the same build saved them for the same target, and "
              "writes back every price it holds; the others leave it. The "
              "output is the same bytes with or without it "
              "(docs/planner.md, \"Price cache\").");
DEFINE_string(explain, "",
              "Print decisions on stderr as they are made: bare --explain "
              "(or 'all') every decision, --explain=OP those naming op OP.");

namespace tilec::tools {
namespace {

// A bare --explain means every decision (--explain=OP names one op).
std::vector<std::string> ExpandBareExplain(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (std::string& arg : args) {
    if (arg == "--") break;
    if (arg == "--explain" || arg == "-explain") arg = "--explain=all";
  }
  return args;
}

// --price_cache, for a pass that prices: the saved prices, if the file is
// there, and where the pass saves its own.
Status PriceCacheOptions(const passes::PassInfo& pass,
                         passes::PassOptions* common) {
  const std::string path = FLAGS_price_cache;
  if (path.empty() || !pass.prices) return Status::Ok();
  if (path == "-") {
    return Status::BadInput(
        "--price_cache=-: the price cache is a file (stdin and stdout carry "
        "the module)");
  }
  common->price_cache_name = ir::DisplayName(path);
  std::error_code error;
  if (std::filesystem::exists(path, error)) {
    TILEC_RETURN_IF_ERROR(
        ir::ReadFile(path, &common->saved_prices).WithContext("--price_cache"));
  }
  common->save_prices = [path](std::string bytes) {
    return ir::WriteFileAtomically(path, bytes);
  };
  return Status::Ok();
}

StatusOr<passes::PassOptions> CommonOptions(const passes::PassInfo& pass) {
  passes::PassOptions common;
  if (FLAGS_max_decisions < -1) {
    return Status::BadInput("--max-decisions=" +
                            std::to_string(FLAGS_max_decisions) +
                            ": expected N >= 0 (or -1 for no limit)");
  }
  common.max_decisions = FLAGS_max_decisions;
  StatusOr<passes::ExplainFilter> explain =
      passes::ExplainFilter::Parse(FLAGS_explain);
  if (!explain.ok()) return explain.status();
  common.explain = *explain;
  common.messages = &std::cerr;
  common.flags = GivenFlags();
  TILEC_RETURN_IF_ERROR(PriceCacheOptions(pass, &common));
  return common;
}

// The sidecar files `module` (read from `input`) names, in its directory:
// inputs a pass's -o must not replace.
std::vector<NamedPath> SidecarFiles(const fb::ModuleT& module,
                                    const std::string& input) {
  std::set<std::string> names;
  for (const auto& value : module.values) {
    if (value->sidecar && ir::IsPlainFileName(value->sidecar->path)) {
      names.insert(value->sidecar->path);
    }
  }
  std::vector<NamedPath> files;
  for (const std::string& name : names) {
    files.push_back({"the sidecar", ir::DirectoryOf(input) + "/" + name});
  }
  return files;
}

Status RunPass(const std::vector<std::string>& args,
               const passes::PassInfo& pass_info, const PassMaker& make,
               const InputCheck& check) {
  std::string input;
  TILEC_RETURN_IF_ERROR(SingleInput(args, &input));
  StatusOr<passes::PassOptions> common = CommonOptions(pass_info);
  if (!common.ok()) return common.status();
  common->input = input;
  StatusOr<std::unique_ptr<passes::Pass>> pass = make(std::move(*common));
  if (!pass.ok()) return pass.status();
  fb::ModuleT module;
  TILEC_RETURN_IF_ERROR(ir::ReadModule(input, &module));
  // Like every tool, a pass never writes over what it reads: a failed or
  // wrong pass must leave its input for the next attempt and for bisection.
  std::vector<NamedPath> inputs = SidecarFiles(module, input);
  inputs.push_back({"the input", input});
  TILEC_RETURN_IF_ERROR(CheckOutputs(
      inputs, {{"-o", FLAGS_o}, {"--price_cache", FLAGS_price_cache}}));
  if (check) {
    TILEC_RETURN_IF_ERROR(check(module).WithContext(ir::DisplayName(input)));
  }
  StatusOr<bool> ran = (*pass)->Run(&module);
  if (!ran.ok()) return ran.status().WithContext(ir::DisplayName(input));
  return ir::WriteModule(std::move(module), ToolName(), FLAGS_o);
}

}  // namespace

Status CheckPlannable(const fb::ModuleT& module) {
  if (module.ops.size() <= kMaxPlannedOps) return Status::Ok();
  return Status::Infeasible(
      std::to_string(module.ops.size()) + " ops, more than the " +
      std::to_string(kMaxPlannedOps) +
      " the planner's search takes (its time grows with the square of the "
      "ops)");
}

int PassToolMain(int argc, char** argv, const passes::PassInfo& pass,
                 const PassMaker& make, const InputCheck& check) {
  std::vector<std::string> storage = ExpandBareExplain(argc, argv);
  std::vector<char*> rewritten;
  for (std::string& arg : storage) rewritten.push_back(arg.data());
  rewritten.push_back(nullptr);
  const std::string usage(pass.usage);
  std::vector<std::string> args =
      InitTool(argc, rewritten.data(), usage.c_str());
  return RunAndFinish([&] { return RunPass(args, pass, make, check); });
}

}  // namespace tilec::tools
