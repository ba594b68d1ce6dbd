#include "tools/common/tool.h"

#include <gflags/gflags.h>
#include <glog/logging.h>
#include <malloc.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <new>
#include <optional>

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

bool FindFlag(const std::string& name, gflags::CommandLineFlagInfo* info) {
  return gflags::GetCommandLineFlagInfo(name.c_str(), info);
}

// --flagfile nests at most this deep (a file naming itself would not end).
constexpr int kMaxFlagfileDepth = 8;

// The shared flags gflags defines for itself that a tool does not take:
// they would silently do nothing through SetCommandLineOption.
bool IsUnsupportedGflagsFlag(const std::string& name) {
  return name == "fromenv" || name == "tryfromenv" || name == "undefok" ||
         name == "helpon" || name == "helpmatch" || name == "helppackage" ||
         name == "helpxml";
}

class FlagParser {
 public:
  explicit FlagParser(ParsedArgs* parsed) : parsed_(parsed) {}

  Status Parse(const std::vector<std::string>& args, size_t first,
               int depth) {
    bool flags_done = false;
    for (size_t i = first; i < args.size(); ++i) {
      const std::string& arg = args[i];
      if (flags_done || arg == "-" || arg.empty() || arg[0] != '-') {
        parsed_->positional.push_back(arg);
        continue;
      }
      if (arg == "--") {
        flags_done = true;
        continue;
      }
      const size_t dashes = arg.rfind("--", 0) == 0 ? 2 : 1;
      const size_t equals = arg.find('=');
      std::string name = arg.substr(dashes, equals == std::string::npos
                                                ? std::string::npos
                                                : equals - dashes);
      std::optional<std::string> value;
      if (equals != std::string::npos) value = arg.substr(equals + 1);
      // A value in the next argument: "-o out.tilec", "--target tiny".
      auto next_value = [&]() -> bool {
        if (value) return true;
        if (i + 1 >= args.size()) return false;
        value = args[++i];
        return true;
      };
      TILEC_RETURN_IF_ERROR(One(arg, name, value, next_value, depth));
    }
    return Status::Ok();
  }

 private:
  template <typename NextValue>
  // `value` is the text after '='; next_value() fills it from the next
  // argument when there was none.
  Status One(const std::string& arg, std::string name,
             std::optional<std::string>& value, NextValue& next_value,
             int depth) {
    if (name == "help" || name == "h" || name == "helpshort" ||
        name == "helpfull" || name == "version") {
      const ParsedArgs::Help help =
          name == "helpfull"  ? ParsedArgs::Help::kFull
          : name == "version" ? ParsedArgs::Help::kVersion
                              : ParsedArgs::Help::kTool;
      if (parsed_->help == ParsedArgs::Help::kNone) parsed_->help = help;
      return Status::Ok();
    }
    if (name == "flagfile") {
      if (!next_value()) return Status::BadInput("--flagfile needs a file");
      return Flagfile(*value, depth);
    }
    if (IsUnsupportedGflagsFlag(name)) {
      return Status::BadInput(arg + ": not supported by tilec tools");
    }
    gflags::CommandLineFlagInfo info;
    bool found = FindFlag(name, &info);
    if (!found && name.find('-') != std::string::npos) {
      std::replace(name.begin(), name.end(), '-', '_');
      found = FindFlag(name, &info);
    }
    if (!found && name.rfind("no", 0) == 0 && !value &&
        FindFlag(name.substr(2), &info) && info.type == "bool") {
      return Set(arg, name.substr(2), "false");
    }
    if (!found) {
      return Status::BadInput("unknown flag " + arg.substr(0, arg.find('=')) +
                              " (--help lists the flags)");
    }
    if (info.type == "bool") return Set(arg, name, value.value_or("true"));
    if (!next_value()) {
      return Status::BadInput(arg + " needs a value (" + info.type + ")");
    }
    return Set(arg, name, *value);
  }

  Status Set(const std::string& arg, const std::string& name,
             const std::string& value) {
    if (gflags::SetCommandLineOption(name.c_str(), value.c_str()).empty()) {
      gflags::CommandLineFlagInfo info;
      FindFlag(name, &info);
      return Status::BadInput("--" + name + "=" + value + ": not a valid " +
                              info.type + " value" +
                              (arg.find('=') == std::string::npos
                                   ? " (given as " + arg + " VALUE)"
                                   : std::string()));
    }
    return Status::Ok();
  }

  Status Flagfile(const std::string& path, int depth) {
    if (depth >= kMaxFlagfileDepth) {
      return Status::BadInput("--flagfile=" + path + ": nested more than " +
                              std::to_string(kMaxFlagfileDepth) + " deep");
    }
    std::string text;
    TILEC_RETURN_IF_ERROR(ir::ReadFile(path, &text, size_t{1} << 20)
                              .WithContext("--flagfile"));
    std::vector<std::string> lines = {""};
    size_t line_number = 0;
    size_t start = 0;
    while (start <= text.size()) {
      size_t end = std::min(text.find('\n', start), text.size());
      ++line_number;
      std::string line = text.substr(start, end - start);
      start = end + 1;
      const size_t a = line.find_first_not_of(" \t\r");
      if (a == std::string::npos || line[a] == '#') continue;
      line = line.substr(a, line.find_last_not_of(" \t\r") - a + 1);
      if (line[0] != '-') {
        return Status::BadInput("--flagfile=" + path + ": line " +
                                std::to_string(line_number) +
                                ": expected a flag, got \"" + line + "\"");
      }
      lines.push_back(line);
    }
    ParsedArgs nested;
    FlagParser parser(&nested);
    TILEC_RETURN_IF_ERROR(
        parser.Parse(lines, 1, depth + 1).WithContext("--flagfile=" + path));
    if (!nested.positional.empty()) {
      return Status::BadInput("--flagfile=" + path + ": \"" +
                              nested.positional[0] + "\" is not a flag");
    }
    if (nested.help != ParsedArgs::Help::kNone &&
        parsed_->help == ParsedArgs::Help::kNone) {
      parsed_->help = nested.help;
    }
    return Status::Ok();
  }

  ParsedArgs* parsed_;
};

// A flag's line in --help: dashed spelling (as the docs write flags), type,
// default and description.
std::string FlagHelp(const gflags::CommandLineFlagInfo& info) {
  std::string name = info.name;
  std::replace(name.begin(), name.end(), '_', '-');
  std::string text = "  --" + name + " (" + info.type;
  if (info.type == "string") {
    text += ", default \"" + info.default_value + "\"";
  } else {
    text += ", default " + info.default_value;
  }
  return text + ")\n      " + info.description + "\n";
}

bool DefinedIn(const gflags::CommandLineFlagInfo& info,
               const std::string& directory) {
  return info.filename.find(directory) != std::string::npos;
}

// What a path names, for CheckOutputs: a regular file's device and inode,
// or the canonical name of an output that does not exist yet. False for
// "-", "", a missing input (a preset name, say) and anything written in
// place (devices, FIFOs).
bool FileIdentity(const std::string& path, bool output, std::string* identity) {
  if (path.empty() || path == "-") return false;
  struct stat info;
  if (stat(path.c_str(), &info) == 0) {
    if (!S_ISREG(info.st_mode) && !S_ISDIR(info.st_mode)) return false;
    *identity = "inode " + std::to_string(info.st_dev) + ":" +
                std::to_string(info.st_ino);
    return true;
  }
  if (!output) return false;
  std::error_code error;
  const std::filesystem::path canonical = std::filesystem::weakly_canonical(
      std::filesystem::absolute(path, error), error);
  *identity = "path " + (error ? path : canonical.string());
  return true;
}

std::string Named(const NamedPath& p) {
  return p.what == "-o" || p.what.rfind("--", 0) == 0 ? p.what + "=" + p.path
                                                      : p.what + " " + p.path;
}

// Every output is written through a temporary beside it, so its directory
// must exist; checked before any work, so that a tool never writes one
// output and then fails on the next.
Status CheckOutputDirectory(const NamedPath& out) {
  if (out.path.empty() || out.path == "-") return Status::Ok();
  std::filesystem::path dir = std::filesystem::path(out.path).parent_path();
  if (dir.empty()) dir = ".";
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) {
    return Status::BadInput(Named(out) + ": no directory " + dir.string() +
                            " to write it in");
  }
  return Status::Ok();
}

}  // namespace

Status CheckOutputs(const std::vector<NamedPath>& inputs,
                    const std::vector<NamedPath>& outputs) {
  std::vector<std::pair<std::string, const NamedPath*>> seen;
  for (const NamedPath& out : outputs) {
    TILEC_RETURN_IF_ERROR(CheckOutputDirectory(out));
    std::string id;
    if (!FileIdentity(out.path, true, &id)) continue;
    for (const NamedPath& in : inputs) {
      std::string in_id;
      if (FileIdentity(in.path, false, &in_id) && in_id == id) {
        return Status::BadInput(Named(out) + " is " + Named(in) +
                                ": refusing to write over an input");
      }
    }
    for (const auto& [other_id, other] : seen) {
      if (other_id == id) {
        return Status::BadInput(Named(*other) + " and " + Named(out) +
                                " are the same file: two outputs cannot "
                                "share a path");
      }
    }
    seen.emplace_back(id, &out);
  }
  return Status::Ok();
}

const std::string& ToolName() { return MutableToolName(); }

Status ParseFlags(const std::vector<std::string>& args, ParsedArgs* parsed) {
  *parsed = ParsedArgs();
  FlagParser parser(parsed);
  return parser.Parse(args, 1, 0);
}

std::string HelpText(const std::string& usage, bool full) {
  std::vector<gflags::CommandLineFlagInfo> all;
  gflags::GetAllFlags(&all);  // sorted by file, then name
  std::string own, shared, library;
  for (const auto& info : all) {
    if (DefinedIn(info, "tools/common/")) {
      shared += FlagHelp(info);
    } else if (DefinedIn(info, "tools/")) {
      own += FlagHelp(info);
    } else {
      library += FlagHelp(info);
    }
  }
  std::string text = usage + "\n";
  if (!own.empty()) text += "\nFlags:\n" + own;
  text += "\nFlags of every tool:\n" + shared;
  text +=
      "  --flagfile=FILE\n      Read flags from FILE, one per line.\n"
      "  --help, --helpfull, --version\n"
      "      This text; every flag, the libraries' too; the schema version.\n";
  if (full) {
    text += "\nLibrary flags (gflags, glog):\n" + library;
  } else {
    text +=
        "\nLogging: --vmodule=FILE=LEVEL turns on one source file's debug "
        "log on stderr (README.md, \"Debug targets\"); --helpfull lists "
        "every library flag.\n";
  }
  return text;
}

namespace {

// A tool runs once and exits, and its large buffers (weights, attention
// scores, tile images) are freed and allocated again op after op. By
// default glibc maps each one of 32 MB or more afresh and unmaps it when
// freed, and gives the heap's free top back to the kernel, so every page
// of the next buffer faults in zeroed again. Freed memory is kept for
// reuse instead, at some peak RSS (plan-ownership on so400m 791 -> 885
// MB). Measured on the so400m model: run-reference 10.4-10.8 s -> 8.8-8.9
// s (system time 1.9 s -> 0.3 s), simulate-device with execution 45.0 s
// -> 41.7 s.
void KeepFreedMemoryForReuse() {
  constexpr int kNever = 1 << 30;  // bytes: above any one buffer
  mallopt(M_MMAP_THRESHOLD, kNever);
  mallopt(M_TRIM_THRESHOLD, kNever);
}

}  // namespace

std::vector<std::string> InitTool(int argc, char** argv, const char* usage) {
  KeepFreedMemoryForReuse();
  std::string name = argv[0];
  size_t slash = name.rfind('/');
  if (slash != std::string::npos) name = name.substr(slash + 1);
  MutableToolName() = name;
  gflags::SetUsageMessage(usage);
  gflags::SetVersionString("schema " + std::to_string(ir::kSchemaVersion));
  ParsedArgs parsed;
  Status status = ParseFlags(std::vector<std::string>(argv, argv + argc),
                             &parsed);
  switch (parsed.help) {
    case ParsedArgs::Help::kNone:
      break;
    case ParsedArgs::Help::kVersion:
      std::cout << name << " (tilec), schema " << ir::kSchemaVersion << "\n";
      std::exit(0);
    case ParsedArgs::Help::kTool:
    case ParsedArgs::Help::kFull:
      std::cout << HelpText(usage, parsed.help == ParsedArgs::Help::kFull);
      std::exit(0);
  }
  if (!status.ok()) std::exit(Finish(status));
  // The tool's own flags that differ from their defaults, by name: what a
  // pass records in its log. Logging, the output paths, --explain and the
  // price cache change what is printed or written beside the output, or
  // how fast, not what is decided, so they are left out: the output stays
  // byte-identical with and without them.
  const std::set<std::string> unrecorded = {"o", "explain", "save_initial_plan",
                                            "price_cache"};
  std::vector<gflags::CommandLineFlagInfo> all;
  gflags::GetAllFlags(&all);
  for (const auto& info : all) {
    if (!info.is_default && !unrecorded.count(info.name) &&
        info.filename.find("tools/") != std::string::npos) {
      MutableGivenFlags().push_back("--" + info.name + "=" +
                                    info.current_value);
    }
  }
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  return parsed.positional;
}

bool FlagGiven(const char* flag) {
  gflags::CommandLineFlagInfo info;
  return FindFlag(flag, &info) && !info.is_default;
}

Status SingleInput(const std::vector<std::string>& args, std::string* path) {
  if (args.size() > 1) {
    return Status::BadInput("expected one input file (or - for stdin), got " +
                            std::to_string(args.size()));
  }
  *path = args.empty() ? "-" : args[0];
  return Status::Ok();
}

Status CheckThreads(int threads) {
  if (threads < 1 || threads > kMaxThreads) {
    return Status::BadInput("--threads=" + std::to_string(threads) +
                            ": expected 1 to " + std::to_string(kMaxThreads));
  }
  return Status::Ok();
}

Status CheckDirectoryFlag(const char* flag, const std::string& path) {
  if (path.empty()) return Status::Ok();
  struct stat info;
  if (stat(path.c_str(), &info) != 0) {
    return Status::BadInput("--" + std::string(flag) + "=" + path + ": " +
                            std::strerror(errno));
  }
  if (!S_ISDIR(info.st_mode)) {
    return Status::BadInput("--" + std::string(flag) + "=" + path +
                            ": not a directory");
  }
  return Status::Ok();
}

const std::vector<std::string>& GivenFlags() { return MutableGivenFlags(); }

int Finish(const Status& status) {
  if (!status.ok()) {
    std::cerr << ToolName() << ": " << EscapeForMessage(status.message())
              << std::endl;
  }
  return status.exit_code();
}

int RunAndFinish(const std::function<Status()>& run) {
  Status status;
  try {
    status = run();
  } catch (const std::bad_alloc&) {
    status = Status::Internal("out of memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    status = Status::Internal(std::string("uncaught exception: ") + e.what());
  } catch (...) {
    status = Status::Internal("uncaught exception");
  }
  return Finish(status);
}

}  // namespace tilec::tools
