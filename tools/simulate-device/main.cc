// simulate-device: runs a module's device program on the tile simulator,
// compares its outputs with the reference and reports cycles.

#include <gflags/gflags.h>

#include "sim/simulate_device.h"
#include "tools/common/tool.h"

DEFINE_string(report, "text", "Report format: text or json.");
DEFINE_string(json_report, "",
              "Also write the report as JSON to this file, from the same run "
              "(scripts/run.sh: the text report and the page's data without "
              "simulating twice).");
DEFINE_string(trace, "",
              "Write a Chrome trace-event JSON file (open it in Perfetto or "
              "chrome://tracing): a track of superstep phases, a track of "
              "per-op spans (the slowest tile's kernels, exchange cycles by "
              "bytes) and one track per busiest tile, in microseconds at the "
              "target's clock.");
DEFINE_string(dump_tensors, "",
              "Directory (created if missing) for .npy files of the graph's "
              "inputs and weights as written by the host, the simulated "
              "outputs (<name>.npy) and the reference outputs "
              "(<name>.reference.npy); each as float32 and, unless F32, as "
              "raw stored codes (<name>.<dtype>.npy).");
DEFINE_bool(compare, true,
            "Run the reference on the module's graph and compare every "
            "output; exit 3 when one is outside tolerance.");
DEFINE_bool(execute, true,
            "false: check the program and count its cycles without running "
            "kernels (no host data, no outputs, nothing compared).");
DEFINE_double(atol, -1,
              "Absolute tolerance as a fraction of each output's scale "
              "(max |reference|): an element passes when |sim - ref| <= "
              "atol * scale + rtol * |ref|. Default: 0.02, or 0.1 when the "
              "graph has an FP8 value.");
DEFINE_double(rtol, -1,
              "Relative tolerance of each element (see --atol). Default: "
              "0.01, or 0.1 when the graph has an FP8 value.");
DEFINE_double(min_cosine, -1,
              "Smallest cosine similarity of each output with the "
              "reference. Default: 0.9999, or 0.99 when the graph has an "
              "FP8 value.");
DEFINE_double(min_unquantized_cosine, -1,
              "For a quantized program: smallest cosine of each output with "
              "the unquantized graph's reference. Default: 0.999 "
              "(docs/quantize.md).");
DEFINE_double(min_branch_cosine, -1,
              "For a quantized program: smallest cosine of each output's "
              "branch (output minus its residual input) with the unquantized "
              "graph's. Default: 0.995 (docs/quantize.md).");
DEFINE_int32(threads, 2,
             "Host threads for the simulator and the reference (results do "
             "not depend on it).");
DEFINE_bool(allow_nonfinite, false,
            "Pass outputs whose NaN or infinite elements equal the "
            "reference's (tests whose expected outputs are non-finite, e.g. "
            "ONNX casts of NaN); otherwise a non-finite output never passes.");
DEFINE_int32(top_tiles, 8, "How many of the busiest tiles the report lists.");
DEFINE_string(inputs, "",
              "Directory with one .npy per graph input, named as "
              "--dump-tensors names them (<name>.npy), in the model's "
              "declared shape or tilec's rows, float32 or the "
              "input's own dtype (sim/inputs.h); the simulator and the "
              "reference both run on them. Empty: inputs from their "
              "recorded seeds.");
DEFINE_string(expect, "",
              "Directory with one float32 .npy per graph output, named "
              "<name>.npy, in the model's declared shape or tilec's rows "
              "(e.g. saved from PyTorch): each simulated output is compared "
              "with it at the tolerance above (--atol, --rtol, --min_cosine) "
              "and reported; exit 3 when one is outside it.");
DEFINE_string(sidecar_dir, "",
              "Directory that sidecar paths are relative to (default: the "
              "input file's directory, or . for stdin).");

namespace {

// Tolerances are fractions (cosine at most 1); a negative value, the
// default, means the defaults of docs/device-program.md, so only an explicit
// one is checked.
tilec::Status CheckTolerance(const char* flag, double value, double most) {
  if (!tilec::tools::FlagGiven(flag)) return tilec::Status::Ok();
  if (!(value >= 0 && value <= most)) {
    return tilec::Status::BadInput("--" + std::string(flag) + "=" +
                                   gflags::GetCommandLineFlagInfoOrDie(flag)
                                       .current_value +
                                   ": expected a number from 0 to " +
                                   (most == 1 ? "1" : "1e300"));
  }
  return tilec::Status::Ok();
}

tilec::Status CheckFlags() {
  TILEC_RETURN_IF_ERROR(CheckTolerance("atol", FLAGS_atol, 1e300));
  TILEC_RETURN_IF_ERROR(CheckTolerance("rtol", FLAGS_rtol, 1e300));
  TILEC_RETURN_IF_ERROR(CheckTolerance("min_cosine", FLAGS_min_cosine, 1));
  TILEC_RETURN_IF_ERROR(CheckTolerance("min_unquantized_cosine",
                                       FLAGS_min_unquantized_cosine, 1));
  TILEC_RETURN_IF_ERROR(
      CheckTolerance("min_branch_cosine", FLAGS_min_branch_cosine, 1));
  TILEC_RETURN_IF_ERROR(tilec::tools::CheckThreads(FLAGS_threads));
  if (FLAGS_top_tiles < 0) {
    return tilec::Status::BadInput("--top_tiles=" +
                                   std::to_string(FLAGS_top_tiles) +
                                   ": must not be negative");
  }
  TILEC_RETURN_IF_ERROR(
      tilec::tools::CheckDirectoryFlag("sidecar_dir", FLAGS_sidecar_dir));
  TILEC_RETURN_IF_ERROR(
      tilec::tools::CheckDirectoryFlag("inputs", FLAGS_inputs));
  return tilec::tools::CheckDirectoryFlag("expect", FLAGS_expect);
}

}  // namespace

int main(int argc, char** argv) {
  auto args = tilec::tools::InitTool(
      argc, argv,
      "simulate-device [FILE|-] [-o REPORT] [--report=text|json] "
      "[--json-report=FILE] [--trace=FILE] [--dump-tensors=DIR]: run a module's device program "
      "on the tile simulator, count its cycles and compare its outputs with "
      "the reference.\n"
      "Exit 0: outputs within tolerance; 2: bad module or malformed program "
      "(one line naming the superstep, tile, buffer and op); 3: the program "
      "runs but an output is outside tolerance (a valid program that does "
      "not compute the graph: the module could not be compiled correctly; "
      "the report is still written); 1: internal error. "
      "docs/device-program.md has the semantics.");
  tilec::sim::SimulateDeviceOptions options;
  tilec::Status status = tilec::tools::SingleInput(args, &options.input);
  if (status.ok() && FLAGS_report != "text" && FLAGS_report != "json") {
    status = tilec::Status::BadInput("--report=" + FLAGS_report +
                                     ": expected text or json");
  }
  if (status.ok()) status = CheckFlags();
  if (status.ok()) {
    status = tilec::tools::CheckOutputs({{"the input", options.input}},
                                        {{"-o", FLAGS_o},
                                         {"--trace", FLAGS_trace},
                                         {"--json-report", FLAGS_json_report}});
  }
  if (!status.ok()) return tilec::tools::Finish(status);
  options.output = FLAGS_o;
  options.json = FLAGS_report == "json";
  options.trace = FLAGS_trace;
  options.json_output = FLAGS_json_report;
  options.dump_dir = FLAGS_dump_tensors;
  options.compare = FLAGS_compare;
  options.execute = FLAGS_execute;
  options.atol = FLAGS_atol;
  options.rtol = FLAGS_rtol;
  options.min_cosine = FLAGS_min_cosine;
  options.allow_nonfinite = FLAGS_allow_nonfinite;
  options.min_unquantized_cosine = FLAGS_min_unquantized_cosine;
  options.min_branch_cosine = FLAGS_min_branch_cosine;
  options.threads = FLAGS_threads;
  options.top_tiles = FLAGS_top_tiles;
  options.sidecar_dir = FLAGS_sidecar_dir;
  options.inputs_dir = FLAGS_inputs;
  options.expect_dir = FLAGS_expect;
  return tilec::tools::RunAndFinish(
      [&] { return tilec::sim::SimulateDevice(options); });
}
