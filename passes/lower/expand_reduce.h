// expand-reduce: makes every reduction of a planned module explicit
// (docs/lowering.md).
//
// For a GEMM with k > 1 (docs/planning.md: partials reduced at the output's
// owners) it records in Operation.reduction, per output range (the part of
// a result tile's block that lies in one GEMM output block): the seed
// partial already on the tile, the remote partials that must arrive, and
// where the result goes; the scratch buffers (initial, remote partials,
// result) with their bytes per tile; and the exchange epochs (stages). It
// decides, each time on the lowered cycles and bytes of both variants:
//   - seed in place: read the seed where the GEMM wrote it (when the range
//     is a column sub-range of the block this means one GEMM call per range
//     and the weight placed as matching column pieces), or copy it;
//   - direct final write: reduce straight into the output buffer where the
//     range is contiguous there, or into a result scratch and copy;
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

namespace tilec::lower {

struct ExpandReduceOptions {
  // Remote partials per exchange phase: 0 = decide (all at once unless
  // memory does not fit), N > 0 = at most N.
  int partials_per_epoch = 0;
  bool seed_in_place = true;       // allow reading seeds in place
  bool direct_final_write = true;  // allow reducing into the output
};

// Fills Operation.reduction of every reducing op and appends the
// "expand-reduce" pass run. Running it again replaces earlier reductions.
// Takes a planned or lowered graph.
class ExpandReducePass : public passes::Pass {
 public:
  explicit ExpandReducePass(ExpandReduceOptions options = {},
                            passes::PassOptions common = {})
      : Pass(std::move(common)), options_(options) {}
  std::string_view name() const override { return "expand-reduce"; }
  std::vector<passes::Stage> Accepts() const override {
    return {passes::Stage::kPlanned, passes::Stage::kReduced};
  }

 protected:
  StatusOr<bool> Transform(fb::ModuleT* module,
                           passes::DecisionLog* log) override;

 private:
  ExpandReduceOptions options_;
};

}  // namespace tilec::lower

#endif  // TILEC_PASSES_LOWER_EXPAND_REDUCE_H_
