// libFuzzer target: import-model --weights, the safetensors reader
// (passes/import/safetensors.h): the header's length, JSON, dtypes, shapes
// and ranges, then every tensor read back as F32.

#include <cstddef>
#include <cstdint>
#include <iostream>
#include <vector>

#include "passes/import/safetensors.h"
#include "tools/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      tilec::fuzz::WriteInput("checkpoint.safetensors", data, size);
  tilec::passes::SafetensorsFile file;
  if (!tilec::passes::SafetensorsFile::Open(path, &file).ok()) return 0;
  for (const auto& [name, entry] : file.entries()) {
    std::vector<float> values;
    tilec::Status read = file.Read(name, entry.shape, &values);
    if (read.code() == tilec::StatusCode::kInternal) {
      std::cerr << read.message() << "\n";
      __builtin_trap();
    }
  }
  return 0;
}
