#ifndef TILEC_TOOLS_COMMON_TOOL_H_
#define TILEC_TOOLS_COMMON_TOOL_H_

// What every tilec binary shares: flag parsing, logging to stderr, reading
// the input module and reporting a failure as one line plus an exit code.

#include <gflags/gflags.h>

#include <string>
#include <vector>

#include "formats/ir.h"
#include "formats/status.h"

// -o PATH: every tool's output (a module, text or a report), "-" for
// stdout; files are written atomically.
DECLARE_string(o);

namespace tilec::tools {

// Parses gflags (removing them from argv), sets glog to log to stderr and
// returns the positional arguments. `usage` is the first line of --help.
// Multiword flags may be spelled with dashes as the design does
// (--max-decisions=3) or with gflags' underscores (--max_decisions=3).
std::vector<std::string> InitTool(int argc, char** argv, const char* usage);

// The flags given on the command line (underscored spelling), without the
// output path and logging flags: what a pass records in its log.
const std::vector<std::string>& GivenFlags();

// The single input path: the one positional argument, or "-" for stdin.
// Anything else is a usage error.
Status SingleInput(const std::vector<std::string>& args, std::string* path);

// Prints "<tool>: <message>" on stderr and returns the status's exit code.
int Finish(const Status& status);

// The tool's name, for messages and the producer string.
const std::string& ToolName();

}  // namespace tilec::tools

#endif  // TILEC_TOOLS_COMMON_TOOL_H_
