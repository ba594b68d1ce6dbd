// simulate-device's JSON (docs/device-program.md, "The report"): the
// --report=json report, from the simulator's and the comparison's report
// structs as nlohmann::ordered_json (keys in the report's order) laid out
// as it has always been, and the Chrome trace (--trace). ReportJson and
// TraceJson (sim/simulate_device.h) are defined here, the reader
// ReportFromJson in report_json_read.cc.

#ifndef TILEC_SIM_REPORT_JSON_H_
#define TILEC_SIM_REPORT_JSON_H_

#include <nlohmann/json.hpp>

#include <string>

#include "formats/status.h"
#include "sim/simulate_device.h"
#include "sim/simulator.h"

namespace tilec::sim {

using Json = nlohmann::ordered_json;

// Found by nlohmann's Json(x) and json.push_back(x) through ADL.
void to_json(Json& j, const SuperstepReport& s);
void to_json(Json& j, const OpReport& o);
void to_json(Json& j, const TileReport& t);
void to_json(Json& j, const SlowPathReport& s);
void to_json(Json& j, const SimResult::RepeatReport& r);
void to_json(Json& j, const OutputCheck& c);

// The whole report: the result's figures, then --expect's checks and the
// comparison with the reference.
Json ReportToJson(const SimResult& result, const SimulateDeviceReport& report);

// The report's text: the top level and "comparison" one member per line,
// the supersteps, ops, slowest tiles and outputs one element per line,
// everything else on one line; finite floating-point numbers as %.9g.
std::string ReportJsonText(const Json& report);

// What a --report=json file holds: the structs ReportToJson writes it from.
struct SimulationReport {
  SimResult result;
  SimulateDeviceReport device;
};

// A --report=json file read back (inspect-program's --simulation), such
// that ReportToJson(result, device) writes the same JSON again. Left at
// their defaults, as the file does not hold them: the result's outputs,
// each superstep's start_cycle, update_tile, compute_spans and
// exchange_split, each tile's per-superstep cycles, and the device
// report's executed, unquantized, floors, tolerance.allow_nonfinite and,
// without a comparison, pass. Errors (kBadInput, one line, without the
// file name: callers add it): not JSON, or a key missing or of the wrong
// type, named by its path ("ops[3].compute_cycles").
StatusOr<SimulationReport> ReportFromJson(const std::string& text);

// Whether every output matched its --expect file (the report's
// "expected.pass").
bool ExpectedPass(const SimulateDeviceReport& report);

}  // namespace tilec::sim

#endif  // TILEC_SIM_REPORT_JSON_H_
