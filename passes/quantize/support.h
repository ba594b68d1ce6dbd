// quantize-fp8's helpers outside the Quantizer class: looking values and
// ops up in a module, the labels and statistics text of its decisions,
// marking a value quantized, an op's FP8-output kernel, pricing a module
// by the planner's greedy plan, and checking calibration inputs.

#ifndef TILEC_PASSES_QUANTIZE_SUPPORT_H_
#define TILEC_PASSES_QUANTIZE_SUPPORT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "passes/plan/cost.h"
#include "passes/plan/planner.h"
#include "passes/quantize/scale.h"

namespace tilec::quantize {

fb::ValueT* FindValue(const fb::ModuleT& module, uint32_t id);
// Index of the op producing value `id`, -1 for inputs and weights.
int ProducerIndex(const fb::ModuleT& module, uint32_t id);
// (op index, operand slot) of every read of value `id`.
std::vector<std::pair<int, int>> Uses(const fb::ModuleT& module, uint32_t id);

std::string ValueLabel(const fb::ValueT& v);
std::string OpLabel(const fb::OperationT& op);
// A fraction as a percentage with four significant digits.
std::string Fraction(double f);
// The value's dtype and its FP8 statistics (amax, saturated, flushed).
std::string StatsText(const fb::ValueT& v);

// `v` stored as `dtype` with scale 2^scale_exp, its statistics measured
// from `magnitudes` and its unquantized dtype kept.
void MarkQuantized(fb::ValueT* v, fb::DType dtype, int scale_exp,
                   const MagnitudeHistogram& magnitudes);

// The FP8-output kernel the op would run if it stored its result in FP8,
// or "" if it has none (docs/machine.md: LayerNorm, bias add + GELU and
// softmax have FP8-output forms).
std::string Fp8OutputKernel(const fb::OperationT& op);

// The whole graph planned by plan-ownership's greedy initial plan: what
// the placement of a cast is priced by. Memory is repaired only when asked
// and the greedy plan does not fit.
struct Priced {
  bool feasible = false;
  bool repaired = false;  // fits only after memory repair
  int64_t cycles = 0;
  int64_t peak = 0;
  // Infeasible: the closest plan's bytes over capacity summed over its
  // steps (Evaluation::Excess), the planner's first measure of nearness.
  int64_t excess = 0;
  std::string why;  // infeasible: the planner's diagnosis
  // Feasible and asked for: the plan itself, which plan-ownership can
  // start from (QuantizeOptions::save_initial_plan).
  std::shared_ptr<const plan::InitialPlan> initial_plan;
};

// `base`: the pass's coster (its transfer caches serve every trial; op
// prices are cached per graph). `keep_plan`: fill Priced::initial_plan,
// which only --save_initial_plan reads (each trial's plan and decisions
// are held as long as its price).
StatusOr<Priced> PriceByPlanning(const fb::ModuleT& module,
                                 const plan::Coster& base, bool repair,
                                 bool keep_plan = false);
std::string PricedText(const Priced& p);

// Neither fits, and `after`'s closest plan is nearer to fitting than
// `before`'s by memory repair's order: less excess, then a lower peak.
bool NearerToFitting(const Priced& after, const Priced& before);
// "the closest plan from 1,234 B over capacity (peak ...) to ...".
std::string NearerText(const Priced& after, const Priced& before);

// Every calibration input in `inputs` (read from `dir`) is finite and not
// all zero.
Status CheckCalibration(const fb::ModuleT& module, const std::string& dir,
                        const std::map<uint32_t, std::vector<float>>& inputs);

}  // namespace tilec::quantize

#endif  // TILEC_PASSES_QUANTIZE_SUPPORT_H_
