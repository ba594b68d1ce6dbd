// libFuzzer target: a --target JSON file (formats/ir.h, ParseTargetJson):
// the JSON parse into the Target table and its checks.

#include <cstddef>
#include <cstdint>
#include <iostream>
#include <string>

#include "formats/ir.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tilec::fb::TargetT target;
  tilec::Status status = tilec::ir::ParseTargetJson(
      std::string(reinterpret_cast<const char*>(data), size), "<fuzz>",
      &target);
  if (status.code() == tilec::StatusCode::kInternal) {
    std::cerr << status.message() << "\n";
    __builtin_trap();
  }
  return 0;
}
