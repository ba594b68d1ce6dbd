// libFuzzer target: the .npy reader (sim/npy.h, ParseNpy) and
// LoadInputs (sim/inputs.h), the reader behind run-reference and
// simulate-device --inputs=DIR and quantize-fp8 --calibration=DIR. The
// input is parsed as bytes, then stands as the file of each input of a
// small module (F16, F32 and FP8 values) in an --inputs directory.

#include <cstddef>
#include <cstdint>
#include <iostream>
#include <map>
#include <vector>

#include "formats/test_graph.h"
#include "sim/inputs.h"
#include "sim/npy.h"
#include "tools/fuzz/fuzz_support.h"

namespace {

const tilec::fb::ModuleT& Module() {
  static const tilec::fb::ModuleT* module = [] {
    using tilec::fb::ValueRole;
    auto* m = new tilec::fb::ModuleT();
    tilec::ir::testing::AddValue(m, "x", {4, 8}, ValueRole::Input);
    uint32_t y = tilec::ir::testing::AddValue(m, "y", {3}, ValueRole::Input);
    m->values[y]->dtype = tilec::fb::DType::F32;
    uint32_t z = tilec::ir::testing::AddValue(m, "z", {2, 2}, ValueRole::Input);
    m->values[z]->dtype = tilec::fb::DType::FP8E4M3;
    return m;
  }();
  return *module;
}

void TrapOnInternal(const tilec::Status& status) {
  if (status.code() != tilec::StatusCode::kInternal) return;
  std::cerr << status.message() << "\n";
  __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tilec::kernels::NpyArray array;
  TrapOnInternal(tilec::kernels::ParseNpy(
      std::string_view(reinterpret_cast<const char*>(data), size), "<fuzz>",
      &array));
  for (const char* name : {"x.npy", "y.npy", "z.npy"}) {
    tilec::fuzz::WriteInput(name, data, size);
  }
  std::map<uint32_t, std::vector<float>> inputs;
  TrapOnInternal(
      tilec::kernels::LoadInputs(Module(), tilec::fuzz::ScratchDir(), &inputs));
  return 0;
}
