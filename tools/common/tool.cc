#include "tools/common/tool.h"

#include <gflags/gflags.h>
#include <glog/logging.h>

#include <cstdio>
#include <iostream>

namespace tilec::tools {
namespace {

std::string& MutableToolName() {
  static std::string* name = new std::string("tilec");
  return *name;
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
  gflags::ParseCommandLineFlags(&argc, &argv, /*remove_flags=*/true);
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

int Finish(const Status& status) {
  if (!status.ok()) {
    std::cerr << ToolName() << ": " << status.message() << std::endl;
  }
  return status.exit_code();
}

}  // namespace tilec::tools
