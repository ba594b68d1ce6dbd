// Rolls identical consecutive layers of a written-out graph into one body
// and a Module.repeats entry (formats/repeat.h, docs/repeat.md): the ops
// of layers 1.. are dropped with their activations, their weights become
// the repeat's iteration weights, and readers of the last layer's result
// read the body's. Importers build every layer (names, seeds and sidecar
// offsets stay those of the written-out graph) and roll afterwards.

#ifndef TILEC_PASSES_IMPORT_ROLL_H_
#define TILEC_PASSES_IMPORT_ROLL_H_

#include <cstddef>
#include <utility>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"

namespace tilec::passes {

// `layers`: consecutive op index ranges [begin, end) of module->ops, one per
// layer, at least two. Each layer must read exactly one activation made
// before it (the previous layer's result, or the first layer's input) and
// produce the one the next layer reads; layers must match op for op (kind,
// attributes, shapes, dtypes, and wiring, with weights matched by position).
// An error names the first difference. Value ids are renumbered densely.
Status RollLayers(const std::vector<std::pair<size_t, size_t>>& layers,
                  fb::ModuleT* module);

}  // namespace tilec::passes

#endif  // TILEC_PASSES_IMPORT_ROLL_H_
