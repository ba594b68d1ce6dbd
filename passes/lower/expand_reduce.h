// expand-reduce: makes every reduction of a planned module explicit
// (docs/lowering.md).
//
// For a GEMM with k > 1 (docs/planning.md: tile ki of an output block
// reduces the ki-th share of its rows) it records in Operation.reduction
// the partials' dtype, the scratch buffers (the seed is each tile's own
// partial, read in place; remote partials; the result, written directly)
// with their bytes per tile, and the exchange epochs (stages). It decides,
// each time on the lowered cycles and bytes of both variants:
//   - 16-bit partials: the result's F16/BF16 where every tile writes its
//     partial with one call (half the exchange of F32), or F32;
//   - partials per epoch: all remote partials in one exchange phase, or
//     fewer at a time (smaller receive buffer, more phases) when the op's
//     live memory would not fit, or when asked.
// A staged GEMM without a K split gets a one-partial reduction (its F32
// accumulator converted into the output). Operand staging (Complete,
// Streamed, Batched(N)) is lowered as the recipe says; the pass logs its
// chunks, phases and buffer sizes against the Complete panel.

#ifndef TILEC_PASSES_LOWER_EXPAND_REDUCE_H_
#define TILEC_PASSES_LOWER_EXPAND_REDUCE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "passes/core/pass.h"
#include "passes/core/pass_table.h"

namespace tilec::lower {

struct ExpandReduceOptions {
  // Remote partials per exchange phase: 0 = decide (all at once unless
  // memory does not fit), N > 0 = at most N.
  int partials_per_epoch = 0;
  // Allow K-split partials in the result's 16-bit dtype.
  bool allow_16bit_partials = true;
};

// Fills Operation.reduction of every reducing op and appends the
// "expand-reduce" pass run. Running it again replaces earlier reductions.
// Takes a planned or lowered graph.
class ExpandReducePass : public passes::Pass {
 public:
  explicit ExpandReducePass(ExpandReduceOptions options = {},
                            passes::PassOptions common = {})
      : Pass(passes::kExpandReduceInfo, std::move(common)), options_(options) {}

 protected:
  StatusOr<bool> Transform(fb::ModuleT* module,
                           passes::DecisionLog* log) override;

 private:
  ExpandReduceOptions options_;
};

}  // namespace tilec::lower

#endif  // TILEC_PASSES_LOWER_EXPAND_REDUCE_H_
