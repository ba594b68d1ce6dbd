// libFuzzer target: the IR reader and verifier (formats/ir.h), as every tool
// reads its input. A module that reads back must also print (dump-ir) and
// serialize again: the verifier accepted it, so the writer must not find it
// invalid.

#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/ir.h"
#include "formats/print.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  tilec::fb::ModuleT module;
  if (!tilec::ir::ParseModule(bytes, "<fuzz>", &module).ok()) return 0;
  (void)tilec::ir::PrintModule(module, {});
  std::string again;
  tilec::Status written =
      tilec::ir::SerializeModule(std::move(module), "ir_fuzz", &again);
  if (written.code() == tilec::StatusCode::kInternal) __builtin_trap();
  return 0;
}
