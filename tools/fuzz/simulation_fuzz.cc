// libFuzzer target: inspect-program's --simulation file, the JSON report
// simulate-device writes (passes/inspect/simulation_report.h).

#include <cstddef>
#include <cstdint>
#include <iostream>
#include <string>

#include "passes/inspect/simulation_report.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tilec::inspect::SimulationReport report;
  tilec::Status status = tilec::inspect::ParseSimulationReport(
      std::string(reinterpret_cast<const char*>(data), size), &report);
  if (status.code() == tilec::StatusCode::kInternal) {
    std::cerr << status.message() << "\n";
    __builtin_trap();
  }
  return 0;
}
