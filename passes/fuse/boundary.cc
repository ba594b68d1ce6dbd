#include "passes/fuse/boundary.h"

#include "formats/repeat.h"

namespace tilec::fuse {

StatusOr<std::vector<int>> OpBodies(const fb::ModuleT& module) {
  StatusOr<std::vector<ir::RepeatBody>> bodies = ir::RepeatBodies(module);
  if (!bodies.ok()) return bodies.status();
  std::vector<int> of(module.ops.size(), -1);
  for (size_t k = 0; k < bodies->size(); ++k) {
    for (size_t i = (*bodies)[k].begin; i < (*bodies)[k].end; ++i) {
      of[i] = static_cast<int>(k);
    }
  }
  return of;
}

bool IsLoopEdge(const fb::ModuleT& module, const fb::OperationT& op) {
  if (op.kind != fb::OpKind::Redistribute || op.results.size() != 1) {
    return false;
  }
  for (const auto& r : module.repeats) {
    if (r->carried_out == op.results[0]) return true;
  }
  return false;
}

}  // namespace tilec::fuse
