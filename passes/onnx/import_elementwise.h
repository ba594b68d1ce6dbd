// Which tilec step a general elementwise ONNX node becomes: Sqrt, Tanh,
// Erf, Sigmoid and Relu of a tensor, and Add, Sub, Mul, Div and Pow of two
// tensors that are the same shape or where one is a row ([N], [1, N], ...)
// broadcast down the other's rows, a column of the other's rows ([T, 1]
// against [T, D], [B, T, 1] against [B, T, D]) broadcast along each row, or
// a constant scalar. import-onnx asks
// this after its patterns (LayerNorm, GELU, softmax, a scalar Mul or Div, a
// bias or residual Add) and emits one Fused op of one Unary or Binary step
// (docs/import-onnx.md, "Elementwise ops").

#ifndef TILEC_PASSES_ONNX_IMPORT_ELEMENTWISE_H_
#define TILEC_PASSES_ONNX_IMPORT_ELEMENTWISE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"

namespace tilec::passes {

// The op types MatchElementwise maps, and their functions.
std::optional<fb::ElementwiseFn> ElementwiseFnOf(const std::string& op_type);

// What import-onnx knows about one input of the node.
struct ElementwiseInput {
  std::vector<int64_t> shape;
  // The value of a constant with one element, through casts.
  std::optional<double> scalar;
  // A graph input or constant (or a view of one): only such a row is read
  // as a per-column operand (a column may be computed).
  bool parameter = false;
};

struct ElementwiseMatch {
  fb::ElementwiseFn fn = fb::ElementwiseFn::Add;
  int running = 0;  // the node input that is the running value
  int other = -1;   // the node input read as the step's operand, -1 unary
  fb::Broadcast broadcast = fb::Broadcast::Full;
  bool operand_first = false;  // `other` is the left-hand side
  // `other` is a constant scalar, held as a [w] row of that value.
  std::optional<double> scalar;
};

// The step that computes a node of `op_type` with output shape `out`, or
// an Infeasible error whose message says what tilec does not broadcast
// (the caller prefixes the node's label).
StatusOr<ElementwiseMatch> MatchElementwise(
    const std::string& op_type, const std::vector<int64_t>& out,
    const std::vector<ElementwiseInput>& inputs);

}  // namespace tilec::passes

#endif  // TILEC_PASSES_ONNX_IMPORT_ELEMENTWISE_H_
