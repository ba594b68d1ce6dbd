#include "tools/common/tool.h"

#include <gflags/gflags.h>
#include <glog/logging.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

DEFINE_string(o, "-",
              "Output path (module, text or report), or - for stdout; "
              "written atomically.");

namespace tilec::tools {
namespace {

std::string& MutableToolName() {
  static std::string* name = new std::string("tilec");
  return *name;
}

std::vector<std::string>& MutableGivenFlags() {
  static auto* flags = new std::vector<std::string>();
  return *flags;
}

bool IsDefinedFlag(const std::string& name) {
  gflags::CommandLineFlagInfo info;
  if (gflags::GetCommandLineFlagInfo(name.c_str(), &info)) return true;
  // --nofoo negates a boolean --foo.
  return name.rfind("no", 0) == 0 &&
         gflags::GetCommandLineFlagInfo(name.substr(2).c_str(), &info) &&
         info.type == "bool";
}

// Rewrites "--max-decisions=3" to "--max_decisions=3" for defined flags;
// everything after "--" is left alone.
void UnderscoreFlagNames(std::vector<std::string>* args) {
  for (size_t i = 1; i < args->size(); ++i) {
    std::string& arg = (*args)[i];
    if (arg == "--") break;
    const size_t dashes = arg.rfind("--", 0) == 0 ? 2 : arg.rfind('-', 0) == 0;
    if (dashes == 0) continue;
    const size_t end = std::min(arg.find('='), arg.size());
    std::string name = arg.substr(dashes, end - dashes);
    if (name.find('-') == std::string::npos) continue;
    std::replace(name.begin(), name.end(), '-', '_');
    if (IsDefinedFlag(name)) {
      arg = arg.substr(0, dashes) + name + arg.substr(end);
    }
  }
}


}  // namespace

const std::string& ToolName() { return MutableToolName(); }

std::vector<std::string> InitTool(int argc, char** argv, const char* usage) {
  std::string name = argv[0];
  size_t slash = name.rfind('/');
  if (slash != std::string::npos) name = name.substr(slash + 1);
  MutableToolName() = name;
  gflags::SetUsageMessage(usage);
  gflags::SetVersionString("schema " + std::to_string(ir::kSchemaVersion));
  // gflags keeps pointers into argv: the storage must outlive parsing.
  static auto* storage = new std::vector<std::string>(argv, argv + argc);
  UnderscoreFlagNames(storage);
  static auto* rewritten = new std::vector<char*>();
  for (std::string& arg : *storage) rewritten->push_back(arg.data());
  rewritten->push_back(nullptr);
  argv = rewritten->data();
  gflags::ParseCommandLineFlags(&argc, &argv, /*remove_flags=*/true);
  // The tool's own flags that differ from their defaults, by name: what a
  // pass records in its log. Logging, the output path and --explain change
  // what is printed, not what is decided, so they are left out: the output
  // stays byte-identical with and without them.
  std::vector<gflags::CommandLineFlagInfo> all;
  gflags::GetAllFlags(&all);
  for (const auto& info : all) {
    if (!info.is_default && info.name != "o" && info.name != "explain" &&
        info.filename.find("tools/") != std::string::npos) {
      MutableGivenFlags().push_back("--" + info.name + "=" +
                                    info.current_value);
    }
  }
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  return std::vector<std::string>(argv + 1, argv + argc);
}

Status SingleInput(const std::vector<std::string>& args, std::string* path) {
  if (args.size() > 1) {
    return Status::BadInput("expected one input file (or - for stdin), got " +
                            std::to_string(args.size()));
  }
  *path = args.empty() ? "-" : args[0];
  return Status::Ok();
}

const std::vector<std::string>& GivenFlags() { return MutableGivenFlags(); }

int Finish(const Status& status) {
  if (!status.ok()) {
    std::cerr << ToolName() << ": " << status.message() << std::endl;
  }
  return status.exit_code();
}

}  // namespace tilec::tools
