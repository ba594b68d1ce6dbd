// Modules built by hand in tests: values with dense ids in creation order,
// F16; an input or weight gets a Gaussian(0, stddev) init from `seed`.

#ifndef TILEC_FORMATS_TEST_GRAPH_H_
#define TILEC_FORMATS_TEST_GRAPH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "formats/tilec_generated.h"

namespace tilec::ir::testing {

uint32_t AddValue(fb::ModuleT* m, const std::string& name,
                  std::vector<int64_t> shape, fb::ValueRole role,
                  uint64_t seed = 0, float stddev = 1.0f);

// An op of one result, with the next op id.
fb::OperationT* AddOp(fb::ModuleT* m, fb::OpKind kind, const std::string& name,
                      std::vector<uint32_t> operands, uint32_t result);

}  // namespace tilec::ir::testing

#endif  // TILEC_FORMATS_TEST_GRAPH_H_
