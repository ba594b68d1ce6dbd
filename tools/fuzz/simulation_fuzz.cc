// libFuzzer target: inspect-program's --simulation file, the JSON report
// simulate-device writes, read back by sim::ReportFromJson
// (sim/report_json.h).

#include <cstddef>
#include <cstdint>
#include <iostream>
#include <string>

#include "sim/report_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tilec::StatusOr<tilec::sim::SimulationReport> report =
      tilec::sim::ReportFromJson(
          std::string(reinterpret_cast<const char*>(data), size));
  if (!report.ok() && report.status().code() == tilec::StatusCode::kInternal) {
    std::cerr << report.status().message() << "\n";
    __builtin_trap();
  }
  return 0;
}
