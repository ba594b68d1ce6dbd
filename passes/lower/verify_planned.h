// The planned-IR verifier: what every tool that reads plan-ownership's
// output (fuse-elementwise, fuse-residual, expand-reduce, emit-device,
// inspect-gemms) checks before it works, so that a corrupted plan is bad
// input (exit 2) naming the op in every one of them, never an internal
// error or a silent success.

#ifndef TILEC_PASSES_LOWER_VERIFY_PLANNED_H_
#define TILEC_PASSES_LOWER_VERIFY_PLANNED_H_

#include "formats/status.h"
#include "formats/tilec_generated.h"

namespace tilec::lower {

// Ok for an unplanned graph (each pass names the stage it needs). Else
// CheckPlanned (every value the device reads has an ownership), and every
// GEMM's recipe agrees with its operands, its grid layout and the target
// (ReadGemmGrid, as the lowering reads it). BadInput naming the value or op.
Status VerifyPlanned(const fb::ModuleT& module);

}  // namespace tilec::lower

#endif  // TILEC_PASSES_LOWER_VERIFY_PLANNED_H_
