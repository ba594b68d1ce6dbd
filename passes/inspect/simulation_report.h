// simulate-device's JSON report (`--report=json`, docs/device-program.md,
// "The report") read back: the simulated totals and per-op figures, and the
// comparison with the reference, for the report page.
//
// The page counts the program's cycles itself with the simulator's timing
// (sim::Simulate without data), so a report only adds what needs the data
// (the comparison) and must describe the same program: CheckReportMatches
// refuses a report whose cycles differ (another program, or a stale file).

#ifndef TILEC_PASSES_INSPECT_SIMULATION_REPORT_H_
#define TILEC_PASSES_INSPECT_SIMULATION_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "formats/status.h"
#include "sim/simulator.h"

namespace tilec::inspect {

struct SimulationReport {
  std::string module;  // the input as simulate-device named it
  std::string target;
  int64_t tiles = 0;
  int64_t total_cycles = 0;
  int64_t compute_cycles = 0;
  int64_t exchange_cycles = 0;
  int64_t supersteps = 0;  // entries of its superstep table
  struct Op {
    uint32_t op = 0;
    int64_t compute_cycles = 0;
    int64_t exchange_cycles = 0;
  };
  std::vector<Op> ops;
  // The comparison with the reference; absent with --compare=false.
  bool compared = false;
  bool pass = false;
  bool fp8_defaults = false;
  double atol = 0;
  double rtol = 0;
  double min_cosine = 0;
  struct Output {
    uint32_t value = 0;
    std::string name;
    std::string type;
    bool pass = false;
    int64_t elements = 0;
    int64_t mismatches = 0;
    int64_t nonfinite = 0;
    double scale = 0;
    double max_abs_err = 0;
    double max_rel_err = 0;
    double cosine = 0;
  };
  std::vector<Output> outputs;
  // simulate-device --expect=DIR: each output against a saved file (e.g.
  // PyTorch's), at the tolerance it was judged by; absent without --expect.
  bool has_expected = false;
  struct Expected {
    std::string dir;
    bool pass = false;
    double atol = 0;
    double rtol = 0;
    double min_cosine = 0;
    std::vector<Output> outputs;
  };
  Expected expected;
};

// Errors (kBadInput, without the file name: callers add it): not JSON, or a
// field the page needs is missing or of the wrong type.
Status ParseSimulationReport(const std::string& json, SimulationReport* report);

// kBadInput unless the report's total, compute and exchange cycles, its
// number of supersteps and every op's compute and exchange cycles equal
// `timing`'s (the same program's cycles counted without data).
Status CheckReportMatches(const SimulationReport& report,
                          const sim::SimResult& timing);

}  // namespace tilec::inspect

#endif  // TILEC_PASSES_INSPECT_SIMULATION_REPORT_H_
