#ifndef TILEC_TOOLS_COMMON_TOOL_H_
#define TILEC_TOOLS_COMMON_TOOL_H_

// What every tilec binary shares: flag parsing, logging to stderr, reading
// the input module and reporting a failure as one line plus an exit code.

#include <gflags/gflags.h>

#include <functional>
#include <string>
#include <vector>

#include "formats/ir.h"
#include "formats/status.h"

// -o PATH: every tool's output (a module, text or a report), "-" for
// stdout; files are written atomically.
DECLARE_string(o);

namespace tilec::tools {

// Parses the flags, sets glog to log to stderr and returns the positional
// arguments. `usage` is the first line of --help. Multiword flags may be
// spelled with dashes as the design does (--max-decisions=3) or with
// gflags' underscores (--max_decisions=3).
//
// Usage errors (an unknown flag, a value that does not parse, a flag
// without its value, a bad --flagfile) print one line "TOOL: problem" and
// exit 2; --help prints the usage, the tool's own flags and the shared tool
// flags and exits 0 (--helpfull: every flag, the libraries' too).
std::vector<std::string> InitTool(int argc, char** argv, const char* usage);

// What ParseFlags found besides the flags it set.
struct ParsedArgs {
  std::vector<std::string> positional;
  enum class Help { kNone, kTool, kFull, kVersion } help = Help::kNone;
};

// The parsing half of InitTool, without exiting: sets every flag in
// `args` (args[0] is the program) through gflags and returns the
// positional arguments, or a kBadInput Status naming the offending flag.
// --flagfile=FILE is read through ir::ReadFile, one flag per line ('#'
// starts a comment line).
Status ParseFlags(const std::vector<std::string>& args, ParsedArgs* parsed);

// The --help text: `usage`, then the flags defined in the tool's own
// directory (tools/<tool>/) and in tools/common/, with their defaults.
std::string HelpText(const std::string& usage, bool full);

// The flags given on the command line (underscored spelling), without the
// output path and logging flags: what a pass records in its log.
const std::vector<std::string>& GivenFlags();

// True when `flag` (underscored name) was set on the command line.
bool FlagGiven(const char* flag);

// The single input path: the one positional argument, or "-" for stdin.
// Anything else is a usage error.
Status SingleInput(const std::vector<std::string>& args, std::string* path);

// Host threads (--threads of run-reference and simulate-device): 1 to
// kMaxThreads, anything else is a usage error naming the flag.
inline constexpr int kMaxThreads = 256;
Status CheckThreads(int threads);

// A directory a flag names (--sidecar_dir, --inputs): refused unless it
// exists and is a directory; "" is accepted (the flag's default).
Status CheckDirectoryFlag(const char* flag, const std::string& path);

// A file a tool reads or writes, and how the command line named it ("the
// model", "--sidecar", "-o").
struct NamedPath {
  std::string what;
  std::string path;
};

// No output may replace an input, and no two outputs may be one file: the
// paths are compared as files after symlinks (and, for a path that does not
// exist yet, as its canonical name). "-", "" and devices or FIFOs (written
// in place, never replaced) are skipped. BadInput naming both otherwise.
// A transforming pass may still write its module in place (-o equal to its
// input): it replaces the module it read with its own result. Every
// output's directory must exist.
Status CheckOutputs(const std::vector<NamedPath>& inputs,
                    const std::vector<NamedPath>& outputs);

// Prints "<tool>: <message>" on stderr (one line: non-printable bytes are
// escaped) and returns the status's exit code.
int Finish(const Status& status);

// Runs a tool's work and Finishes its status. The last resort for what no
// check caught: an exception escaping `run` (std::bad_alloc from a size a
// check let through, ...) is an internal error, exit 1, with one line,
// instead of an abort.
int RunAndFinish(const std::function<Status()>& run);

// formats/ir.h's, for the tools' messages.
using ir::EscapeForMessage;

// The tool's name, for messages and the producer string.
const std::string& ToolName();

}  // namespace tilec::tools

#endif  // TILEC_TOOLS_COMMON_TOOL_H_
