#ifndef TILEC_SIM_ACCURACY_H_
#define TILEC_SIM_ACCURACY_H_

// The accuracy of a quantized graph (quantize-fp8, docs/quantize.md)
// against the unquantized one it came from: the unquantized graph rebuilt
// from any stage, per-output and branch comparisons, and the documented
// floors. quantize-fp8 logs them for the reference; simulate-device checks
// the simulated outputs with them.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "formats/tilec_generated.h"
#include "sim/reference.h"
#include "sim/simulator.h"

namespace tilec::sim {

// `module` with every value quantize-fp8 made FP8 back in its unquantized
// dtype (a repeat's twins too: they are values; its Cast ops become
// identity casts): the graph to measure a
// quantized program's accuracy against. Works on any stage's module (the
// device program, if any, is dropped).
std::unique_ptr<fb::ModuleT> Unquantized(const fb::ModuleT& module);

// One output of a quantized graph against the unquantized graph's.
struct OutputAccuracy {
  uint32_t value = 0;
  std::string name;
  Comparison full;
  // The output minus its residual input (an Add whose other operand is a
  // graph input, not a repeat's carried_in, which the last of several
  // iterations reads as the previous one's result), where there is one:
  // the part quantization changes.
  bool has_branch = false;
  uint32_t residual = 0;
  Comparison branch;
};

// Compares the outputs of two reference runs of the same graph (quantized
// and not).
std::vector<OutputAccuracy> CompareOutputs(
    const fb::ModuleT& module, const kernels::ReferenceResult& quantized,
    const kernels::ReferenceResult& unquantized);
// One output `value` computed as `got` (e.g. simulated) against the
// unquantized run; graph inputs (for the residual) are read from
// `unquantized`, which holds the same inputs.
OutputAccuracy CompareOutput(const fb::ModuleT& module, uint32_t value,
                             std::span<const float> got,
                             const kernels::ReferenceResult& unquantized);

// The floors for a quantized program against the unquantized graph: by
// default the documented ones (docs/quantize.md, "Tolerances against the
// unquantized graph"), set for a block whose residual carries most of the
// output; a model whose error nothing hides (e.g. a head after the last
// LayerNorm) states its own (simulate-device --min_unquantized_cosine,
// --min_branch_cosine).
struct UnquantizedFloors {
  double output = 0.999;
  double branch = 0.995;
};
bool WithinUnquantizedTolerance(const OutputAccuracy& a,
                                const UnquantizedFloors& floors);
// True when some value of `module` was quantized by quantize-fp8.
bool IsQuantized(const fb::ModuleT& module);

// "cosine 0.999998 max_abs 0.0123 max_rel 0.0045" (fixed format).
std::string AccuracyText(const Comparison& c);

}  // namespace tilec::sim

#endif  // TILEC_SIM_ACCURACY_H_
