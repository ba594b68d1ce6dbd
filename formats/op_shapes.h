// Shape rules of the graph-level operation kinds.
//
// One function decides whether an op's operand and result shapes agree with
// its kind, so the importer's tests and the IR verifier apply the same rules.
// This library depends only on the generated schema code (//formats:tilec_fbs)
// so that the formats library can call it without a dependency cycle.
//
// Conventions (see passes/import/model_builder.h): activations are 2-D
// [rows, width] with rows = batch * tokens; attention scores and
// probabilities are [batch, heads, tokens, tokens]; the fused QKV activation
// is [rows, 3 * heads * head_dim] with columns [q heads | k heads | v heads].
//
//   LayerNorm         x [r,w], gamma [w], beta [w]      -> [r,w]
//   MatMul            a [M,K], b [K,N]                  -> [M,N]
//   BiasAdd           a [M,N], bias [N]                 -> [M,N]
//   Gelu, Cast        x                                  -> shape of x
//   Softmax           x                                  -> shape of x
//   Redistribute      x                                  -> shape of x
//   Add               a, b (same shape)                  -> that shape
//   AttentionScores   qkv [N*T, 3*H*D]                   -> [B, H, T, T]
//                     q [B*Tq, H*D], kv [B*Tk, 2*H*D]     -> [B, H, Tq, Tk]
//   AttentionContext  probs [B, H, T, T], qkv [N*T, 3*H*D] -> [B*T, H*D]
//                     probs [B, H, Tq, Tk], kv [B*Tk, 2*H*D] -> [B*Tq, H*D]
//   Patchify          image [B, C, H, W] -> [B*floor(H/p)*floor(W/p), C*p*p]
//   CopyRows          x_0 [r_0,w], ..., x_k [r_k,w]        -> [r,w]
//
// Attention has a self form (one fused qkv operand, columns [q | k | v]
// heads) and a cross form (queries from their own operand, kv columns
// [k | v] heads: the MAP head's probe over the tokens); the staged operand's
// column count (3HD or 2HD) tells them apart.
// For the attention kinds H and D are the op's `heads` and `head_dim`
// attributes; the self form reads images [F, F + B) of qkv's N images (F
// the `first_image` attribute, F + B <= N, when attention runs in image
// steps; else F = -1 and N = B), the cross form all of kv (F = -1); for Patchify p is the `patch` attribute, at most H and W
// (trailing rows and columns that fill no patch are dropped, as a
// stride = kernel convolution drops them). Every dimension of every shape must be positive.
// CopyRows's segments (`rows`) must be sorted by `at` and tile the result's
// rows exactly once (at_0 = 0, at_{i+1} = at_i + count_i, the last ending at
// r), each with count >= 1 and source rows [first, first + count) inside its
// operand, and every operand must be read by some segment.
// Fused, Moments and Normalize have no fixed shape rule in the schema yet and
// are accepted as they are.

#ifndef TILEC_FORMATS_OP_SHAPES_H_
#define TILEC_FORMATS_OP_SHAPES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"

namespace tilec::ir {

// One CopyRows segment (fb::RowCopy): result rows [at, at + count) are rows
// [first, first + count) of operand `operand`.
struct RowSegment {
  uint32_t operand = 0;
  int64_t first = 0;
  int64_t count = 0;
  int64_t at = 0;
};

// The parts of an op that its shape rule looks at, independent of whether the
// op comes from the object API or from a flat buffer.
struct OpShapeQuery {
  uint32_t id = 0;
  fb::OpKind kind = fb::OpKind::LayerNorm;
  std::string name;  // only used in messages; may be empty
  int32_t heads = 0;
  int32_t head_dim = 0;
  int32_t patch = 0;
  int32_t first_image = -1;      // self-attention in image steps
  std::vector<RowSegment> rows;  // CopyRows
  std::vector<std::vector<int64_t>> operands;
  std::vector<std::vector<int64_t>> results;
};

// Ok when the shapes agree with the kind, otherwise BadInput with one line
// such as
// "op 19 (BiasAdd l0.mlp.up_bias): operand 1 has shape [4303], expected
// [4304] (the columns of operand 0 [729,4304])".
Status CheckOpShapes(const OpShapeQuery& op);

// The same for an op of an object-API module. Operand and result ids are
// looked up among module.values by their `id` field; an id that names no
// value is reported as an error.
Status CheckOpShapes(const fb::OperationT& op, const fb::ModuleT& module);

// The same for a flat (already verified) buffer.
Status CheckOpShapes(const fb::Operation& op, const fb::Module& module);

// An op's CopyRows segments as the shape rule reads them (null entries of
// an object-API op are skipped; the verifier refuses them).
std::vector<RowSegment> RowSegments(const fb::OperationT& op);
std::vector<RowSegment> RowSegments(const fb::Operation& op);

// The query of an object-API op, operands and results not filled in.
OpShapeQuery ShapeQueryOf(const fb::OperationT& op);

// Appends `segment` to a CopyRows op's segments.
void AppendRowSegment(const RowSegment& segment, fb::OperationT* op);

// "[729,1152]": the format used in the messages above.
std::string ShapeToString(const std::vector<int64_t>& shape);

// The shape the model declares for a graph input or output
// (Value.declared_shape), else the value's own shape: the shape of its
// .npy files.
const std::vector<int64_t>& DeclaredShape(const fb::ValueT& value);

// Records `model_shape` (the shape the source model gives a graph input or
// output: ONNX's, or the PyTorch module's) as the value's declared shape
// where it differs from the value's own (tilec's rows); where they agree
// nothing is declared, so a value has a declared shape only when its files
// need one. Every importer declares through this one rule.
void DeclareModelShape(const std::vector<int64_t>& model_shape,
                       fb::ValueT* value);

}  // namespace tilec::ir

#endif  // TILEC_FORMATS_OP_SHAPES_H_
