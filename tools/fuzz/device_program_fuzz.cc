// libFuzzer target: the device-program verifier (sim/simulator.h) that
// simulate-device, inspect-exchanges, inspect-program and inspect-gemms run
// on a module read from bytes. A program it accepts must also be costed by
// the simulator without touching data (the same checks, then the cycle
// count over every superstep).

#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/ir.h"
#include "sim/simulator.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  tilec::fb::ModuleT module;
  if (!tilec::ir::ParseModule(bytes, "<fuzz>", &module).ok()) return 0;
  tilec::Status verified = tilec::sim::VerifyDeviceProgram(module);
  if (verified.code() == tilec::StatusCode::kInternal) __builtin_trap();
  if (!verified.ok()) return 0;
  tilec::sim::SimOptions options;
  options.execute = false;
  options.threads = 1;
  tilec::sim::SimResult result;
  tilec::Status costed = tilec::sim::Simulate(module, {}, options, &result);
  if (!costed.ok()) __builtin_trap();  // verified, so it must cost
  return 0;
}
