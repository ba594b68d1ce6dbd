// quantize-fp8: FP8 GEMM operands with calibrated power-of-two scales and
// casts placed by cost (passes/quantize/quantize.h, docs/quantize.md). This
// file reads the --policy file and turns flags into options.

#include <gflags/gflags.h>

#include "formats/ir.h"
#include "passes/quantize/quantize.h"
#include "tools/common/pass_tool.h"
#include "tools/common/tool.h"

namespace {

const tilec::quantize::QuantizeOptions kDefaults;

// --activation_format's spelling of an FP8 dtype.
const char* FormatFlag(tilec::fb::DType format) {
  return format == tilec::fb::DType::FP8E5M2 ? "e5m2" : "e4m3";
}

}  // namespace

DEFINE_bool(fp8, kDefaults.enabled,
            "Quantize. --fp8=false leaves every value in its dtype (the F16 "
            "pipeline) and only logs that it did.");
DEFINE_string(policy, "",
              "Policy file: lines 'value NAME: f16|e4m3|e5m2 [exp=N]' (NAME or "
              "%ID) and 'op ID: exclude|fp8' (docs/quantize.md).");
DEFINE_string(calibration, "",
              "Directory of .npy files, one per graph input (the layout of "
              "run-reference --inputs), to calibrate activation scales on; "
              "default: the model's seeded inputs.");
DEFINE_string(activation_format, FormatFlag(kDefaults.activation_format),
              "FP8 format of activations: e4m3 or e5m2 (weights are e4m3 "
              "unless the policy says otherwise).");
DEFINE_int32(weight_margin, kDefaults.weight_margin,
             "Bits of headroom below the exponent that just fits a weight's "
             "amax (weights are known exactly, so 0).");
DEFINE_int32(activation_margin, kDefaults.activation_margin,
             "Bits of headroom below the exponent that just fits an "
             "activation's calibrated amax (1: inputs up to twice the "
             "calibrated range do not saturate).");
DEFINE_string(sidecar_dir, "",
              "Directory that weight sidecar paths are relative to (default: "
              "the input file's directory, or . for stdin).");
DEFINE_int32(threads, kDefaults.threads,
             "Threads of the calibration reference runs; with 2 or more, "
             "a second thread prices the trial plans ahead (the output is "
             "the same bytes).");

DEFINE_string(save_initial_plan, "",
              "Also write the greedy plan of the output graph that the "
              "decisions by cost made, as plan-ownership's checkpoint of no "
              "attempts, for plan-ownership --initial_plan (written only "
              "where that plan fits).");

namespace {

tilec::StatusOr<std::unique_ptr<tilec::passes::Pass>> MakePass(
    tilec::passes::PassOptions common) {
  tilec::quantize::QuantizeOptions options;
  options.enabled = FLAGS_fp8;
  if (FLAGS_activation_format == "e4m3") {
    options.activation_format = tilec::fb::DType::FP8E4M3;
  } else if (FLAGS_activation_format == "e5m2") {
    options.activation_format = tilec::fb::DType::FP8E5M2;
  } else {
    return tilec::Status::BadInput("--activation_format=" +
                                   FLAGS_activation_format +
                                   ": expected e4m3 or e5m2");
  }
  if (FLAGS_weight_margin < 0 || FLAGS_weight_margin > 16 ||
      FLAGS_activation_margin < 0 || FLAGS_activation_margin > 16) {
    return tilec::Status::BadInput(
        "--weight_margin and --activation_margin must be in 0..16");
  }
  if (FLAGS_threads < 1) {
    return tilec::Status::BadInput("--threads must be >= 1");
  }
  options.weight_margin = FLAGS_weight_margin;
  options.activation_margin = FLAGS_activation_margin;
  options.calibration_dir = FLAGS_calibration;
  options.sidecar_dir = FLAGS_sidecar_dir.empty()
                            ? tilec::ir::DirectoryOf(common.input)
                            : FLAGS_sidecar_dir;
  options.threads = FLAGS_threads;
  // -o may replace the input, not --save_initial_plan.
  TILEC_RETURN_IF_ERROR(tilec::tools::CheckOutputs(
      {{"the input", common.input}, {"--policy", FLAGS_policy}},
      {{"--save_initial_plan", FLAGS_save_initial_plan}}));
  TILEC_RETURN_IF_ERROR(tilec::tools::CheckOutputs(
      {{"--policy", FLAGS_policy}},
      {{"-o", FLAGS_o}, {"--save_initial_plan", FLAGS_save_initial_plan}}));
  if (!FLAGS_save_initial_plan.empty()) {
    options.save_initial_plan = [](const tilec::fb::ModuleT& plan) {
      return tilec::ir::WriteModule(plan, "quantize-fp8",
                                    FLAGS_save_initial_plan);
    };
  }
  if (!FLAGS_policy.empty()) {
    options.policy_name = tilec::ir::DisplayName(FLAGS_policy);
    TILEC_RETURN_IF_ERROR(
        tilec::ir::ReadFile(FLAGS_policy, &options.policy_text));
    // An empty file is a policy too: the defaults.
    if (options.policy_text.empty()) options.policy_text = "\n";
  }
  return std::unique_ptr<tilec::passes::Pass>(
      new tilec::quantize::QuantizeFp8Pass(std::move(options),
                                           std::move(common)));
}

}  // namespace

int main(int argc, char** argv) {
  return tilec::tools::PassToolMain(
      argc, argv, tilec::passes::kQuantizeFp8Info, MakePass,
      tilec::tools::CheckPlannable);
}
