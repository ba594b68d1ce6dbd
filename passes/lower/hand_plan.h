// Hand-made plans for tests (testonly): ownerships and recipes written as
// docs/planning.md specifies them, so the lowering can be tested on shapes
// and splits of our choosing (uneven blocks, every staging, replicas)
// independently of the planner's search.

#ifndef TILEC_PASSES_LOWER_HAND_PLAN_H_
#define TILEC_PASSES_LOWER_HAND_PLAN_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "sim/simulator.h"

namespace tilec::lower::testing {

// A graph from import-model's builder on a target preset.
fb::ModuleT Import(const std::string& preset, const std::string& part,
                   const std::string& target, int64_t tokens, int64_t width,
                   int64_t mlp_width, int64_t heads = 0);

fb::ValueT* FindValue(fb::ModuleT* module, uint32_t id);
fb::OperationT* FindOp(fb::ModuleT* module, const std::string& name);

struct GemmShape {
  int m = 1, n = 1, k = 1;
  int first = 0;
  int stride = 1;
  fb::Staging staging = fb::Staging::Complete;
  int chunk_k = 0;
  int batch_chunks = 1;
};

// GEMM recipe + its result ownership + its weight's resident ownership.
void PlanGemm(fb::ModuleT* module, fb::OperationT* op, const GemmShape& g);
// Elementwise recipe with `layout` for the result; a bias operand gets the
// planning.md bias ownership; other operands not in `layout` get a
// Redistribute inserted before the op.
void PlanElementwise(fb::ModuleT* module, fb::OperationT* op,
                     const fb::OwnershipT& layout);
// Row-wise (LayerNorm, Softmax) over `layout` (complete rows), gamma and
// beta replicated on its tiles; the input gets a Redistribute if needed.
void PlanRowWise(fb::ModuleT* module, fb::OperationT* op,
                 const fb::OwnershipT& layout);
// Sets the ownership of every graph input that has none (first consumer's
// layout is not known here: `ownership`).
void PlaceInput(fb::ModuleT* module, uint32_t value,
                const fb::OwnershipT& ownership);
// Inserts `Redistribute` of operand `index` of `op` to `ownership`.
void InsertRedistribute(fb::ModuleT* module, fb::OperationT* op, int index,
                        const fb::OwnershipT& ownership);

// The MLP block (LN, up, bias, GELU, down, bias, residual) planned with the
// given GEMM grids; LN on `ln_parts` row tiles; up-bias on the up GEMM's
// result ownership; GELU on `gelu_layout` (a Redistribute between) unless
// it is empty; down-bias on the down result ownership; residual add there,
// with `x` redistributed to it.
struct MlpPlan {
  int ln_parts = 4;
  GemmShape up;
  GemmShape down;
  bool gelu_flat = false;  // GELU over flat(grain=4) on all tiles
  bool bias_flat = false;  // the up bias add too (bias replicated)
  int ln_first = 0;        // first tile of the LayerNorm rows
};
void PlanMlpBlock(fb::ModuleT* module, const MlpPlan& plan);

// A repeat's twins take their body weights' ownerships, as plan-ownership
// gives them (docs/repeat.md).
void PlanTwins(fb::ModuleT* module);

// Default reductions (seed in place, direct write, one epoch) on every
// K-split GEMM, as expand-reduce would record them with no flags.
void DefaultReductions(fb::ModuleT* module);

// Simulates module.program with host data from the IR and compares every
// output with the reference. `max_abs_err` is the largest over outputs.
struct SimCheck {
  sim::SimResult result;
  bool pass = true;
  double max_abs_err = 0;
  double max_rel_err = 0;
  int64_t mismatches = 0;
  std::string message;
};
Status SimulateAgainstReference(const fb::ModuleT& module,
                                const sim::Tolerance& tolerance,
                                SimCheck* check);

// The figures emit-device logs for its program ("program" info decision):
// the planner's estimate (sum over ops) and the predicted simulated cycles;
// zeros if the module has no emit-device run.
struct ProgramFigures {
  int64_t planned = 0;
  int64_t predicted = 0;
};
ProgramFigures ProgramFiguresOf(const fb::ModuleT& module);

}  // namespace tilec::lower::testing

#endif  // TILEC_PASSES_LOWER_HAND_PLAN_H_
