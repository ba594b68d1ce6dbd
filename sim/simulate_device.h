#ifndef TILEC_SIM_SIMULATE_DEVICE_H_
#define TILEC_SIM_SIMULATE_DEVICE_H_

// simulate-device's library (tools/simulate-device/main.cc parses the
// flags and calls SimulateDevice): runs a module's device program on the
// simulator (sim/simulator.h), runs the reference on its graph, compares
// every output and writes the report, a Chrome trace and tensor dumps.
// docs/device-program.md describes the semantics, the report and the
// tolerances.

#include <string>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "sim/accuracy.h"
#include "sim/simulator.h"

namespace tilec::sim {

struct SimulateDeviceOptions {
  std::string input = "-";   // module path or "-"
  std::string output = "-";  // report path or "-"
  bool json = false;         // report as JSON instead of text
  std::string trace;         // Chrome trace-event JSON path, "" for none
  // The JSON report also written here ("" for none), beside `output`'s
  // report, from the same run.
  std::string json_output;
  std::string dump_dir;      // .npy directory, "" for none
  bool compare = true;       // run the reference and compare outputs
  // false: check the program and count its cycles without running kernels
  // (no host data, no outputs, nothing compared).
  bool execute = true;
  // Tolerances; a negative value takes sim::DefaultTolerance's.
  double atol = -1;
  double rtol = -1;
  double min_cosine = -1;
  // Non-finite outputs equal to the reference's pass (sim::Tolerance).
  bool allow_nonfinite = false;
  // Floors against the unquantized graph; negative: UnquantizedFloors'.
  double min_unquantized_cosine = -1;
  double min_branch_cosine = -1;
  int threads = 2;
  int top_tiles = 8;
  std::string sidecar_dir;  // "" = the input's directory
  std::string
      inputs_dir;  // graph inputs as .npy (sim/inputs.h), "" = seeds
  // Expected outputs as .npy (sim/inputs.h, e.g. PyTorch's), compared
  // with the simulated ones at the same tolerance; "" = none.
  std::string expect_dir;
};

// One output's comparison with the reference.
struct OutputCheck {
  uint32_t value = 0;
  std::string name;
  std::string type;  // e.g. "f16[8,32]"
  sim::Comparison comparison;
};

// Everything the report prints.
struct SimulateDeviceReport {
  std::string module_name;
  bool compared = false;
  bool executed = true;
  sim::Tolerance tolerance;
  bool fp8 = false;  // tolerance chosen for a graph with FP8 values
  std::vector<OutputCheck> checks;
  // A quantized program (quantize-fp8) also against the unquantized graph's
  // reference: each output and its branch, with the documented floors
  // (docs/quantize.md), which count towards `pass`.
  std::vector<OutputAccuracy> unquantized;
  UnquantizedFloors floors;
  // --expect: the directory and each output against its expected file,
  // which count towards `pass`.
  std::string expect_dir;
  std::vector<OutputCheck> expected;
  bool pass = true;
};

// The whole tool. Exit codes through the Status: 2 for a bad module or a
// malformed program, 3 when the program runs but an output is outside
// tolerance (the report is written first), 1 for internal errors.
Status SimulateDevice(const SimulateDeviceOptions& options);

// Report and trace text (deterministic for the same inputs).
std::string ReportText(const sim::SimResult& result,
                       const SimulateDeviceReport& report);
std::string ReportJson(const sim::SimResult& result,
                       const SimulateDeviceReport& report);
std::string TraceJson(const sim::SimResult& result);

}  // namespace tilec::sim

#endif  // TILEC_SIM_SIMULATE_DEVICE_H_
