// Repeat bodies as the fusion passes see them (docs/repeat.md): nothing
// fuses across a body's boundary, so each op's body decides what it may
// join.

#ifndef TILEC_PASSES_FUSE_BOUNDARY_H_
#define TILEC_PASSES_FUSE_BOUNDARY_H_

#include <cstdint>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"

namespace tilec::fuse {

// By op index: the repeat whose body holds the op, -1 outside every body.
StatusOr<std::vector<int>> OpBodies(const fb::ModuleT& module);

// Whether `op` is a loop edge: a Redistribute writing a repeat's
// carried_out (plan-ownership's last op of a body, plan.h).
bool IsLoopEdge(const fb::ModuleT& module, const fb::OperationT& op);

}  // namespace tilec::fuse

#endif  // TILEC_PASSES_FUSE_BOUNDARY_H_
