// Small hand-made graphs for the planner's and the pipeline's tests, where
// import-model has no part that builds them.

#ifndef TILEC_PASSES_PLAN_TEST_MODULES_H_
#define TILEC_PASSES_PLAN_TEST_MODULES_H_

#include <cstdint>
#include <string>

#include "formats/tilec_generated.h"

namespace tilec::plan {

// A patch embedding on `target`: image [1,3,side,side] (input; pixels past
// the last whole patch are dropped) -> Patchify(patch) -> [patches,
// 3*patch*patch] x w [3*patch*patch, width] -> y (output), all F16, with
// seeded input and weight.
fb::ModuleT PatchEmbeddingModule(const std::string& target, int64_t side,
                                 int64_t patch, int64_t width);

}  // namespace tilec::plan

#endif  // TILEC_PASSES_PLAN_TEST_MODULES_H_
