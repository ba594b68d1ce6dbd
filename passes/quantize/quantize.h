// quantize-fp8 as a library (docs/quantize.md): what
// tools/quantize-fp8/main.cc calls.
//
// On an unplanned graph it makes both operands of every MatMul FP8 (the
// GEMM kernel takes both FP8 or both F16), unless the --policy file keeps a
// value in its dtype, fixes its format or scale, or excludes the op:
//   - weights (E4M3 unless the policy says otherwise) are quantized in
//     place: their dtype becomes FP8 with a per-tensor power-of-two scale
//     from the largest magnitude of their actual contents, less
//     --weight_margin bits; every reader (reference, simulator,
//     --dump-tensors) stores round(W * 2^exp) of the generated or sidecar
//     contents with the numerics library's encoder;
//   - activations (E4M3, or --activation_format=e5m2) get a scale from a
//     calibration run of the reference executor on the model's seeded
//     inputs or on --calibration=DIR, less --activation_margin bits, and a
//     Cast op into a new FP8 value that the GEMM reads;
//   - each such cast is then placed by cost: fused into its producer where
//     the producer has an FP8-output kernel (layernorm_fp8, normalize_fp8,
//     softmax_fp8, bias_gelu_fp8) and the value has no other reader, or
//     kept as a Cast op, which the planner places (at the producer's owners
//     when that is cheapest, so the copy to the GEMM moves FP8 bytes). Both
//     are priced by planning the whole graph with plan-ownership's greedy
//     initial plan (memory repaired), and the cheaper that fits is kept;
//   - attention's GEMMs (context P V, then scores Q K^T) run on FP8
//     operands when the graph planned so is cheaper: the probabilities
//     stored FP8 by softmax_fp8 (exponent fitting their bound 1), qkv cast
//     once to FP8 for every attention GEMM that runs FP8;
//   - every quantized value records amax, exponent and the saturated and
//     flushed fractions (Value.fp8_*), shown by dump-ir;
//   - the accuracy of the quantized graph against the unquantized one (same
//     inputs, reference executor) is logged per output: cosine, max abs and
//     max rel error, and the branch's (output minus residual input) cosine.
// Every choice is a Decision with the cycles and bytes of both sides.

#ifndef TILEC_PASSES_QUANTIZE_QUANTIZE_H_
#define TILEC_PASSES_QUANTIZE_QUANTIZE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "passes/core/pass.h"
#include "passes/core/pass_table.h"
#include "sim/reference.h"

namespace tilec::quantize {

struct QuantizeOptions {
  bool enabled = true;  // --fp8=false: every value keeps its dtype
  fb::DType weight_format = fb::DType::FP8E4M3;
  fb::DType activation_format = fb::DType::FP8E4M3;
  // Bits of headroom below the exponent that just fits amax. Weights are
  // known exactly, so none; activations are calibrated on one input, and
  // one bit leaves room for inputs up to twice the calibrated range.
  int weight_margin = 0;
  int activation_margin = 1;
  // --policy: the file's text and the name its errors cite ("" : none).
  std::string policy_text;
  std::string policy_name;
  // --calibration=DIR (sim/inputs.h layout); "" : the seeded inputs.
  std::string calibration_dir;
  std::string sidecar_dir = ".";
  // Threads of the reference runs; 2 or more also plan the unquantized
  // graph beside the calibration run, and then price on a second thread
  // the trial graph the decisions are expected to make next (the same
  // output).
  int threads = 2;
  // Price cast placements by planning (false: keep every cast a Cast op;
  // for tests of the rest of the pass).
  bool place_by_cost = true;
  // --save_initial_plan: receives the greedy plan of the output graph that
  // the decisions by cost made, as plan-ownership's checkpoint of no
  // attempts (plan::InitialPlanCheckpoint; the tool writes it atomically),
  // so that plan-ownership --initial_plan does not plan it again. Not
  // called where that plan does not fit or nothing was priced.
  std::function<Status(const fb::ModuleT&)> save_initial_plan;
};

class QuantizeFp8Pass : public passes::Pass {
 public:
  explicit QuantizeFp8Pass(QuantizeOptions options = {},
                           passes::PassOptions common = {})
      : Pass(passes::kQuantizeFp8Info, std::move(common)),
        options_(std::move(options)) {}

 protected:
  StatusOr<bool> Transform(fb::ModuleT* module,
                           passes::DecisionLog* log) override;

 private:
  QuantizeOptions options_;
};

// The pass with `enabled` false: every value keeps its dtype (the F16
// pipeline, quantize-fp8 --fp8=false). Tests that pin recipes written for
// F16 (chunk_k=16 is F16's K granule) run the pipeline with it.
std::unique_ptr<passes::Pass> KeepDTypesPass();

}  // namespace tilec::quantize

#endif  // TILEC_PASSES_QUANTIZE_QUANTIZE_H_
