// Shared by the fuzz targets: the input written to a file for parsers that
// read a path, not bytes (safetensors, --inputs / --calibration
// directories), and the fixed graph of those that parse against one.

#ifndef TILEC_TOOLS_FUZZ_FUZZ_SUPPORT_H_
#define TILEC_TOOLS_FUZZ_FUZZ_SUPPORT_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include "formats/ir.h"

namespace tilec::fuzz {

// A fresh directory under /tmp, the same one for every call.
inline const std::string& ScratchDir() {
  static const std::string* dir = [] {
    char pattern[] = "/tmp/tilec-fuzz.XXXXXX";
    if (mkdtemp(pattern) == nullptr) std::abort();
    return new std::string(pattern);
  }();
  return *dir;
}

// Writes the input to ScratchDir()/name and returns its path.
inline std::string WriteInput(const std::string& name, const uint8_t* data,
                              size_t size) {
  const std::string path = ScratchDir() + "/" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data),
             static_cast<std::streamsize>(size));
  return path;
}

// The module TILEC_FUZZ_GRAPH names (scripts/fuzz.sh makes it); exits 2
// naming `target` when it cannot be read. Call from LLVMFuzzerInitialize.
inline const fb::ModuleT& FuzzGraph(const char* target) {
  static const fb::ModuleT* graph = [target] {
    const char* path = std::getenv("TILEC_FUZZ_GRAPH");
    auto* module = new fb::ModuleT();
    Status read = path ? ir::ReadModule(path, module)
                       : Status::BadInput("TILEC_FUZZ_GRAPH unset");
    if (!read.ok()) {
      std::cerr << target << ": " << read.message() << "\n";
      std::exit(2);
    }
    return module;
  }();
  return *graph;
}

}  // namespace tilec::fuzz

#endif  // TILEC_TOOLS_FUZZ_FUZZ_SUPPORT_H_
