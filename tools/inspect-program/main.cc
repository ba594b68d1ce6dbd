// inspect-program: the report page of a compiled program, one
// self-contained HTML file (passes/inspect/program_report.h, docs/report.md).

#include <gflags/gflags.h>

#include <algorithm>
#include <cstdlib>

#include "formats/ir.h"
#include "passes/inspect/program_report.h"
#include "tools/common/tool.h"

DEFINE_string(simulation, "",
              "simulate-device --report=json output for this program: adds "
              "the comparison with the reference (accuracy); its cycles must "
              "equal the program's.");
DEFINE_double(compile_seconds, -1,
              "Host wall-clock seconds the compile took (shown in the "
              "summary; negative: not shown).");
DEFINE_double(simulate_seconds, -1,
              "Host wall-clock seconds simulate-device took (as above).");
DEFINE_string(format, "html",
              "html: the page; json: only its data section (what the page "
              "draws, for scripts and golden files).");
DEFINE_int32(busiest_tiles, 4,
             "Lay out the buffers of this many tiles with the most live "
             "bytes.");
DEFINE_string(tiles, "",
              "Also lay out the buffers of these tiles (comma-separated "
              "numbers).");
DEFINE_int32(largest, 5,
             "Transfers kept per superstep and op for the largest-transfers "
             "table.");
DEFINE_int32(threads, 2, "Host threads for the simulator's timing run.");

namespace tilec::tools {
namespace {

Status ParseTiles(const std::string& text, std::vector<int>* tiles) {
  size_t at = 0;
  while (at < text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    char* end = nullptr;
    const long tile = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || tile < 0) {
      return Status::BadInput("--tiles=" + text + ": '" + item +
                              "' is not a tile number");
    }
    tiles->push_back(static_cast<int>(tile));
    at = comma + 1;
  }
  return Status::Ok();
}

Status Run(const std::vector<std::string>& args) {
  std::string input;
  TILEC_RETURN_IF_ERROR(SingleInput(args, &input));
  if (FLAGS_format != "html" && FLAGS_format != "json") {
    return Status::BadInput("--format=" + FLAGS_format +
                            ": expected html or json");
  }
  inspect::ReportOptions options;
  TILEC_RETURN_IF_ERROR(ParseTiles(FLAGS_tiles, &options.tiles));
  options.module_name = ir::DisplayName(input);
  options.compile_seconds = FLAGS_compile_seconds;
  options.simulate_seconds = FLAGS_simulate_seconds;
  options.busiest_tiles = FLAGS_busiest_tiles;
  options.largest_transfers = FLAGS_largest;
  options.threads = FLAGS_threads;
  TILEC_RETURN_IF_ERROR(CheckOutputs(
      {{"the input", input}, {"--simulation", FLAGS_simulation}},
      {{"-o", FLAGS_o}}));
  fb::ModuleT module;
  TILEC_RETURN_IF_ERROR(ir::ReadModule(input, &module));
  sim::SimulationReport simulation;
  if (input == "-" && FLAGS_simulation == "-") {
    return Status::BadInput(
        "the program and --simulation cannot both be read from stdin");
  }
  if (!FLAGS_simulation.empty()) {
    options.simulation_name = ir::DisplayName(FLAGS_simulation);
    std::string json;
    TILEC_RETURN_IF_ERROR(ir::ReadFile(FLAGS_simulation, &json));
    StatusOr<sim::SimulationReport> read = sim::ReportFromJson(json);
    if (!read.ok()) return read.status().WithContext(options.simulation_name);
    simulation = std::move(*read);
    options.simulation = &simulation;
  }
  std::string data;
  TILEC_RETURN_IF_ERROR(inspect::ReportData(module, options, &data));
  return ir::WriteFileAtomically(
      FLAGS_o, FLAGS_format == "json" ? data : inspect::ReportPage(data));
}

}  // namespace
}  // namespace tilec::tools

int main(int argc, char** argv) {
  auto args = tilec::tools::InitTool(
      argc, argv,
      "inspect-program [flags] [PROGRAM|-] [--simulation=REPORT.json] "
      "[-o PAGE.html]: the report page of a device program (emit-device's "
      "output): summary, timeline, per-op table, memory, exchanges and the "
      "decisions of every pass, in one self-contained HTML file "
      "(docs/report.md).\nExit 0: page written; 2: bad usage, a module "
      "without a device program, a malformed program, or a --simulation "
      "file that is not simulate-device's JSON report of this program; 1: "
      "internal error.");
  return tilec::tools::RunAndFinish(
      [&] { return tilec::tools::Run(args); });
}
