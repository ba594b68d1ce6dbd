// Graphs for the passes' tests: import-model's on a chosen target, and
// small hand-made ones where import-model has no part that builds them.

#ifndef TILEC_PASSES_PLAN_TEST_MODULES_H_
#define TILEC_PASSES_PLAN_TEST_MODULES_H_

#include <cstdint>
#include <string>

#include "formats/tilec_generated.h"
#include "passes/import/model_builder.h"

namespace tilec::plan {

// import-model's graph of `preset` and `part` for `target` (a preset name),
// as the tool builds it.
fb::ModuleT Model(const std::string& target, const std::string& preset,
                  passes::ModelOverrides overrides = {},
                  const std::string& part = "mlp-block");

// A preset shrunk for the tiny target: `tokens` tokens of width 64, an MLP of
// `mlp_width`, `heads` heads; layers as the preset's unless set.
passes::ModelOverrides TinyOverrides(int64_t tokens, int64_t heads,
                                     int64_t mlp_width = 128);

// `layers` SigLIP MLP blocks of [tokens, 64] x [64, mlp_width] on the tiny
// target, rolled into one repeat (docs/repeat.md) or written out.
fb::ModuleT TinyBlocks(int layers, bool repeat, int64_t tokens = 16,
                       int64_t mlp_width = 128);

// `m` (with one repeat) and an op of `kind` (LayerNorm or Gelu) after the
// body reading carried_out, whose result becomes the output in its place.
fb::ModuleT WithOpAfterBody(fb::ModuleT m, fb::OpKind kind);

// A patch embedding on `target`: image [1,3,side,side] (input; pixels past
// the last whole patch are dropped) -> Patchify(patch) -> [patches,
// 3*patch*patch] x w [3*patch*patch, width] -> y (output), all F16, with
// seeded input and weight.
fb::ModuleT PatchEmbeddingModule(const std::string& target, int64_t side,
                                 int64_t patch, int64_t width);

// The three row movements of issue 12 on `target`, all F16 with seeded
// contents: patches [B*P, D] (input) with a class token cls [1, D] (weight)
// prepended per image (CopyRows -> tokens [B*(P+1), D]); a position table
// pos [P+1, D] (weight) broadcast over the batch (CopyRows -> positions);
// x = tokens + positions; h = x w [D, N] (weight); and each image's class
// row of h picked for a head (CopyRows -> head [B, N], the output).
fb::ModuleT RowMovementModule(const std::string& target, int64_t images,
                              int64_t patches, int64_t width, int64_t n);

// import-model's SigLIP encoder layer (attention and MLP) shrunk for
// `target` with `tokens` tokens and `heads` heads, with LayerScale as
// DINOv2 and EVA write it: each residual branch multiplied by a learned
// per-channel [width] vector (seeded Gaussian(0, 0.1)) before its residual
// Add, a Fused op of one Binary Mul step with a Row operand.
fb::ModuleT LayerScaleLayer(const std::string& target, int64_t tokens,
                            int64_t heads);

// The same layer with per-token scales instead: each residual branch
// multiplied by a [rows, 1] column (a Binary Mul step with a Column
// operand), the attention branch's a seeded weight, the MLP branch's
// computed on the device as sigmoid of a [rows, 1] graph input (a gate),
// so the column's per-row slot is met both by placing a parameter and by
// redistributing a computed value.
fb::ModuleT RowGateLayer(const std::string& target, int64_t tokens,
                         int64_t heads);

}  // namespace tilec::plan

#endif  // TILEC_PASSES_PLAN_TEST_MODULES_H_
