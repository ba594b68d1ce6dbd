// fuse-residual as a library (docs/fusion.md): a residual add whose sum
// feeds a LayerNorm computes that LayerNorm's row statistics in the same
// kernel (residual_moments: 250 + rows (40 + 7 ceil(w/2)) against add's
// 200 + 4 ceil(n/4) and the statistics inside layernorm), and the LayerNorm
// becomes a Normalize of the sum with those statistics. Where the add's
// tiles hold column slices of rows, each writes partial moments of its
// slice and the lowering combines them on the LayerNorm's row owners (Chan's
// formula, as for a split LayerNorm).
//
// Decided by cost, region by region: the add, the copies between it and
// the LayerNorm, and the LayerNorm are lowered both ways (passes/lower, the
// code emit-device runs) and priced as the simulator counts them; the
// fused form is kept only when it is cheaper and its scratch fits. Each
// decision logs both numbers: "before 8,211, after 8,632".

#ifndef TILEC_PASSES_FUSE_RESIDUAL_H_
#define TILEC_PASSES_FUSE_RESIDUAL_H_

#include <string_view>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "passes/core/pass.h"
#include "passes/core/pass_table.h"

namespace tilec::fuse {

class FuseResidualPass : public passes::Pass {
 public:
  explicit FuseResidualPass(passes::PassOptions common = {})
      : Pass(passes::kFuseResidualInfo, std::move(common)) {}

 protected:
  StatusOr<bool> Transform(fb::ModuleT* module,
                           passes::DecisionLog* log) override;
};

}  // namespace tilec::fuse

#endif  // TILEC_PASSES_FUSE_RESIDUAL_H_
