// inspect-program: the report page of a compiled program. One
// self-contained HTML file (inline SVG, CSS and JavaScript; nothing is
// fetched) whose data section is a JSON document built here from the device
// program module alone, plus, when given, simulate-device's JSON report (the
// comparison with the reference) and the host's compile and simulate times.
//
// What the data holds (docs/report.md has every field):
//   - summary: cycles and time, planner estimate, accuracy, peak memory;
//   - throughput: cycles per image, images per second and the fraction of
//     the FP8 peak (throughput.h);
//   - timeline: every superstep's compute (the slowest tile's kernels by
//     op) and exchange (cycles by op), as the simulator counts them;
//   - ops: owners, recipe, estimate against simulated cycles, bytes, GEMM
//     MACs and the cycles their kernels took (for % of AMP peak);
//   - memory: peak live bytes per tile (memory_use.h) and, for a few tiles,
//     every buffer with its address and lifetime;
//   - exchange: bytes and fragments per tile for every superstep and op
//     (exchange_totals.h), and the largest transfers;
//   - decisions: every pass run of the module's log.
// Per-tile arrays are run-length encoded and stored once however many
// supersteps or ops share them, so the data grows with the distinct
// patterns, not with tiles x supersteps.

#ifndef TILEC_PASSES_INSPECT_PROGRAM_REPORT_H_
#define TILEC_PASSES_INSPECT_PROGRAM_REPORT_H_

#include <string>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "sim/report_json.h"

namespace tilec::inspect {

struct ReportOptions {
  std::string module_name;  // the input as the page names it
  // simulate-device's report of this program (sim::ReportFromJson), or
  // null. It only adds what needs data (the comparisons): the page counts
  // the cycles itself, and the report's must equal them.
  const sim::SimulationReport* simulation = nullptr;
  std::string simulation_name;
  // Host wall-clock seconds of compiling and simulating; negative: unknown.
  double compile_seconds = -1;
  double simulate_seconds = -1;
  // Tiles whose buffers the page lays out by address: this many with the
  // most live bytes, and every tile listed.
  int busiest_tiles = 4;
  std::vector<int> tiles;
  // Transfers kept per superstep and op for the "largest transfers" table.
  int largest_transfers = 5;
  int threads = 2;  // for the simulator's timing run
};

// The data section. Errors (kBadInput) start with the file they are about:
// module_name for a module without a device program or a malformed program
// (the simulator's message), simulation_name for a report of another
// program; a --tiles entry outside the target is a usage error.
Status ReportData(const fb::ModuleT& module, const ReportOptions& options,
                  std::string* json);

// The page: the built-in HTML, CSS and script around `data_json` (which
// must be ReportData's output).
std::string ReportPage(const std::string& data_json);

}  // namespace tilec::inspect

#endif  // TILEC_PASSES_INSPECT_PROGRAM_REPORT_H_
