#ifndef TILEC_FORMATS_OP_SHAPES_H_
#define TILEC_FORMATS_OP_SHAPES_H_

#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"

namespace tilec::ir {

// Checks operand and result counts and shapes against the op's kind; the
// message names the op id and the mismatch.
Status CheckOpShapes(const fb::OperationT& op,
                     const std::vector<const fb::ValueT*>& operands,
                     const std::vector<const fb::ValueT*>& results);

}  // namespace tilec::ir

#endif  // TILEC_FORMATS_OP_SHAPES_H_
