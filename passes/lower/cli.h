// Command-line spellings shared by the lowering tools: the design's dashed
// flag names (--max-decisions=N) are accepted for gflags' underscored ones,
// and a bare --explain means --explain=true.

#ifndef TILEC_PASSES_LOWER_CLI_H_
#define TILEC_PASSES_LOWER_CLI_H_

#include <initializer_list>
#include <string>
#include <vector>

namespace tilec::lower {

// Rewrites `argv` in place into `storage` and returns the new argv (with a
// trailing nullptr); `dashed` lists the dashed names to accept.
inline std::vector<char*> DashedFlags(int argc, char** argv,
                                      std::initializer_list<const char*> dashed,
                                      std::vector<std::string>* storage) {
  storage->assign(argv, argv + argc);
  for (std::string& arg : *storage) {
    for (const char* name : dashed) {
      const std::string flag = std::string("--") + name;
      if (arg.rfind(flag, 0) == 0 &&
          (arg.size() == flag.size() || arg[flag.size()] == '=')) {
        std::string underscored = name;
        for (char& c : underscored) c = c == '-' ? '_' : c;
        arg = "--" + underscored + arg.substr(flag.size());
      }
    }
  }
  std::vector<char*> out;
  for (std::string& arg : *storage) out.push_back(arg.data());
  out.push_back(nullptr);
  return out;
}

// The flags given on the command line, as recorded in the pass log.
inline std::vector<std::string> GivenFlags(const std::vector<std::string>& args) {
  std::vector<std::string> flags;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) == 0 && a.rfind("--o=", 0) != 0 && a != "--o" &&
        a.rfind("--v", 0) != 0) {
      flags.push_back(a);
    }
  }
  return flags;
}

}  // namespace tilec::lower

#endif  // TILEC_PASSES_LOWER_CLI_H_
