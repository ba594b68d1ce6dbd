#include "passes/lower/verify_planned.h"

#include "passes/core/pass.h"
#include "passes/lower/lowering.h"

namespace tilec::lower {

Status VerifyPlanned(const fb::ModuleT& module) {
  // An unplanned graph is the pass's to refuse, naming the stage it needs.
  if (passes::StageOf(module) == passes::Stage::kGraph) return Status::Ok();
  TILEC_RETURN_IF_ERROR(CheckPlanned(module));
  for (const auto& op : module.ops) {
    if (op->kind != fb::OpKind::MatMul || IsHostOp(*op)) continue;
    StatusOr<GemmGrid> grid = ReadGemmGrid(module, *op);
    if (!grid.ok()) return grid.status();
  }
  return Status::Ok();
}

}  // namespace tilec::lower
