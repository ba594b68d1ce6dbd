// Which kernels run an elementwise body, and at what cost: the one
// definition that the planner's pricing (passes/plan), the fusion passes
// (passes/fuse) and the lowering (passes/lower) share, so a fused region is
// priced as exactly the calls it is lowered to.
//
// A body is a list of FusedSteps applied to a running value (a Fused op's
// own body, or the single step of a BiasAdd, Gelu, Add or Cast op). Steps
// that the reference does not round between become one kernel where the
// registry has one:
//   BiasAdd, Gelu [, Cast]   -> bias_gelu (bias_gelu_fp8's formula when
//                               its output is FP8: the cast folded in)
//   ResidualAdd, Moments     -> residual_moments
//   BiasAdd                  -> bias_add
//   Gelu                     -> gelu
//   ResidualAdd              -> add
//   Cast                     -> cast
//   Moments                  -> ln_moments (of the stored value)
//   Scale                    -> scale
//   Unary                    -> unary
//   Binary                   -> binary, binary_row (a Row broadcast) or
//                               binary_col (a Column broadcast)

#ifndef TILEC_KERNELS_FUSED_BODY_H_
#define TILEC_KERNELS_FUSED_BODY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "formats/tilec_generated.h"
#include "kernels/cost.h"
#include "kernels/status.h"

namespace tilec::kernels {

// One kernel call of a compiled body, made per tile and [rows, w] box.
struct BodyKernel {
  std::string kernel;  // the registry's name (kernels/registry.h)
  int operand = -1;    // op operand it reads besides the running value
  bool bias = false;   // `operand` is a [w] row broadcast down the rows
  bool binary = false;  // `operand` is a second full-size input
  bool column = false;  // `operand` is a [rows, 1] column, one value per row
  int form = 0;         // GELU form (fb::GeluForm)
  fb::ElementwiseFn fn = fb::ElementwiseFn::Add;  // unary, binary(_row/_col)
  bool operand_first = false;  // binary(_row/_col): operand fn running value
  float scale = 1.0f;          // scale's factor
  // Output dtype when the call does not write the op's result (temporaries
  // keep F32, so the body rounds only where it casts); a cast's dtype.
  fb::DType dtype = fb::DType::F32;
  int scale_exp = 0;
  bool moments = false;  // writes the op's moments result (second result)
  int first_step = 0;    // the body steps it runs: [first_step, end_step)
  int end_step = 0;
};

// Whether the step's operand is a [w] row broadcast down the rows (the
// planner gives it a per-column slot).
bool ReadsRow(const fb::FusedStepT& step);

// Whether the step's operand is a [rows, 1] column broadcast along each row
// (the planner gives it a per-row slot: the rows of each tile's boxes).
bool ReadsColumn(const fb::FusedStepT& step);

// Whether a call needs no row structure: no per-column or per-row operand
// and no row moments, so it can run over a tile's whole range as [1, n]
// (the lowering does; the planner prices it so).
bool RowFree(const BodyKernel& call);

// The body of an elementwise op: a Fused op's steps, or the one step that a
// BiasAdd, Gelu, Add or Cast op is (`result` gives a Cast its dtype).
// BadInput for other op kinds.
StatusOr<std::vector<fb::FusedStepT>> BodySteps(const fb::OperationT& op,
                                                const fb::ValueT& result);

// The calls that run `steps` for an op with `operands` operands and
// `results` results. Errors (BadInput) start with `where`: an empty body, a
// step naming a missing operand, Moments not last, a Scale step, a result
// count that does not match (two with Moments: value and moments), a Unary
// step with a binary function or the reverse.
StatusOr<std::vector<BodyKernel>> CompileBody(
    const std::vector<fb::FusedStepT>& steps, size_t operands, size_t results,
    const std::string& where);

// The params of one call on a [rows, w] box, in the registry's layout.
std::vector<int64_t> BodyKernelParams(const BodyKernel& call, int64_t rows,
                                      int64_t w);

// Its fparams (scale's factor), in the registry's layout.
std::vector<float> BodyKernelFparams(const BodyKernel& call);

// Cycles of one call on a [rows, w] box writing `out` (its variant: FP8
// output formulas), through the registry as the simulator charges it (fast
// path: the emitter puts binary inputs in different memory elements).
StatusOr<int64_t> BodyKernelCycles(const CostModel& model,
                                   const BodyKernel& call, fb::DType out,
                                   int64_t rows, int64_t w);

// The dtype call `index` of `calls` writes in an op whose (first) result is
// `result`: the result's for the last value-writing call, else its own.
fb::DType BodyKernelOutput(const std::vector<BodyKernel>& calls, size_t index,
                           fb::DType result);

// "bias_gelu+add": the calls' kernel names, for messages.
std::string BodyKernelNames(const std::vector<BodyKernel>& calls);

}  // namespace tilec::kernels

#endif  // TILEC_KERNELS_FUSED_BODY_H_
