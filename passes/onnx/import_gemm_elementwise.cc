// The importer's ops that map one ONNX node to tilec ops (importer.h):
// MatMul and Gemm (transB, alpha, beta, C), Add as a bias, residual or
// per-image table, a scalar Mul or Div, Cast, and any other elementwise
// node as a Fused op of one step (import_elementwise.h).

#include "passes/onnx/importer.h"

#include <memory>

#include "passes/onnx/import_elementwise.h"

namespace tilec::passes::onnx_import {

Status Importer::EmitAdd(const NodeProto& node, const std::string& t,
                         const Shape& want, uint32_t* id) {
  const Shape& out = *ShapeOf(t);
  fb::DType dtype;
  TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
  const Shape view = View2D(out);
  const Shape last = {out.empty() ? 1 : out.back()};
  for (int side = 0; side < 2; ++side) {
    const std::string& bias = node.input(side);
    const std::string& x = node.input(1 - side);
    const Shape* bs = ShapeOf(bias);
    const Shape* xs = ShapeOf(x);
    if (bs == nullptr || xs == nullptr || Elements(*xs) != Elements(out)) {
      continue;
    }
    // A row broadcast over the rows; with one row, a parameter of lower
    // rank than the output (a Linear's bias at batch 1) is still a bias.
    const bool row = IsRowParam(bias, last) && Elements(*bs) == last[0] &&
                     (Elements(*bs) != Elements(out) ||
                      bs->size() < out.size());
    double scalar = 0;
    const bool constant_scalar = Scalar(bias, &scalar) && Elements(out) > 1;
    if (!row && !constant_scalar) continue;
    uint32_t a, b;
    TILEC_RETURN_IF_ERROR(Value(x, view, &a));
    if (row) {
      TILEC_RETURN_IF_ERROR(RowParam(bias, view[1], &b));
    } else {
      b = NewWeight(bias, {view[1]},
                    std::vector<float>(view[1], static_cast<float>(scalar)),
                    dtype);
    }
    *id = NewOp(fb::OpKind::BiasAdd, NodeName(node), {a, b}, t, view, dtype);
    return Status::Ok();
  }
  // One image's table added to every image (a [1, T, D] position
  // embedding at batch B > 1): the table's rows copied per image, then a
  // same-shape Add, as import-model builds it.
  for (int side = 0; side < 2; ++side) {
    const Shape* ts = ShapeOf(node.input(side));
    const Shape* xs = ShapeOf(node.input(1 - side));
    if (ts == nullptr || xs == nullptr || out.empty() ||
        Elements(*xs) != Elements(out) || ts->empty() ||
        ts->back() != out.back() || !LeadingBroadcast(*ts, out)) {
      continue;
    }
    uint32_t a, table, b;
    TILEC_RETURN_IF_ERROR(Value(node.input(1 - side), view, &a));
    TILEC_RETURN_IF_ERROR(Value(node.input(side), View2D(*ts), &table));
    TILEC_RETURN_IF_ERROR(EmitPerImage(node, table,
                                       Elements(out) / Elements(*ts),
                                       node.input(side) + ".rows", &b));
    *id = NewOp(
        fb::OpKind::Add, NodeName(node),
        side == 0 ? std::vector<uint32_t>{b, a} : std::vector<uint32_t>{a, b},
        t, view, dtype);
    return Status::Ok();
  }
  const Shape* as = ShapeOf(node.input(0));
  const Shape* bs = ShapeOf(node.input(1));
  if (as == nullptr || bs == nullptr || Elements(*as) != Elements(out) ||
      Elements(*bs) != Elements(out)) {
    // No form above holds it; the general step names what it refuses.
    return EmitElementwise(node, t, want, id);
  }
  uint32_t a, b;
  TILEC_RETURN_IF_ERROR(Value(node.input(0), want, &a));
  TILEC_RETURN_IF_ERROR(Value(node.input(1), want, &b));
  *id = NewOp(fb::OpKind::Add, NodeName(node), {a, b}, t, want, dtype);
  return Status::Ok();
}

// x * c or x / c for a scalar constant c: a Fused op of one Scale step.
Status Importer::EmitScale(const NodeProto& node, const std::string& t,
                           const Shape& want, uint32_t* id) {
  const bool div = node.op_type() == "Div";
  for (int side = 0; side < (div ? 1 : 2); ++side) {
    double c = 0;
    if (!Scalar(node.input(1 - side), &c) || (div && c == 0)) continue;
    return EmitScaleOf(NodeName(node), node.input(side), t, want,
                       div ? 1.0 / c : c, id);
  }
  return EmitElementwise(node, t, want, id);
}

// Any other Add, Sub, Mul, Div, Pow, Sqrt, Tanh, Erf, Sigmoid or Relu:
// a Fused op of one Unary or Binary step (import_elementwise.h).
Status Importer::EmitElementwise(const NodeProto& node, const std::string& t,
                                 const Shape& want, uint32_t* id) {
  const Shape* out = ShapeOf(t);
  if (out == nullptr) return Unknown(t, "tensor");
  std::vector<ElementwiseInput> inputs;
  for (const std::string& in : node.input()) {
    const Shape* shape = ShapeOf(in);
    if (shape == nullptr) return Unknown(in, "tensor");
    ElementwiseInput input;
    input.shape = *shape;
    if (double c = 0; Scalar(in, &c)) input.scalar = c;
    // A graph input or constant (or a view of one), whatever its shape.
    input.parameter = IsRowParam(in, *shape);
    inputs.push_back(std::move(input));
  }
  StatusOr<ElementwiseMatch> match =
      MatchElementwise(node.op_type(), *out, inputs);
  if (!match.ok()) return Unsupported(node, match.status().message());
  fb::DType dtype;
  TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
  const bool row = match->broadcast == fb::Broadcast::Row;
  const bool column = match->broadcast == fb::Broadcast::Column;
  // A row or column operand needs the [rows, w] view; otherwise the
  // consumer's.
  const Shape shape = row || column ? View2D(*out) : want;
  std::vector<uint32_t> operands(1);
  TILEC_RETURN_IF_ERROR(
      Value(node.input(match->running), shape, &operands[0]));
  if (match->other >= 0) {
    const std::string& other = node.input(match->other);
    uint32_t b;
    if (match->scalar) {
      b = NewWeight(other, {shape[1]},
                    std::vector<float>(shape[1],
                                       static_cast<float>(*match->scalar)),
                    dtype);
    } else if (row) {
      TILEC_RETURN_IF_ERROR(RowParam(other, shape[1], &b));
    } else if (column) {
      TILEC_RETURN_IF_ERROR(Value(other, {shape[0], 1}, &b));
    } else {
      TILEC_RETURN_IF_ERROR(Value(other, shape, &b));
    }
    operands.push_back(b);
  }
  fb::OperationT* op = nullptr;
  *id = NewOp(fb::OpKind::Fused, NodeName(node), operands, t, shape, dtype,
              &op);
  auto step = std::make_unique<fb::FusedStepT>();
  step->kind = match->other >= 0 ? fb::FusedStepKind::Binary
                                 : fb::FusedStepKind::Unary;
  step->fn = match->fn;
  step->operand = match->other >= 0 ? 1 : -1;
  step->broadcast = match->broadcast;
  step->operand_first = match->operand_first;
  op->body.push_back(std::move(step));
  return Status::Ok();
}

Status Importer::EmitScaleOf(const std::string& name, const std::string& x,
                             const std::string& t, const Shape& want,
                             double factor, uint32_t* id) {
  uint32_t in;
  TILEC_RETURN_IF_ERROR(Value(x, want, &in));
  fb::DType dtype;
  TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
  return EmitScaleValue(name, in, t, factor, dtype, id);
}

Status Importer::EmitCast(const NodeProto& node, const std::string& t,
                          const Shape& want, uint32_t* id) {
  if (!IsFloatCast(node)) {
    return Unsupported(node, "a cast to or from a non-float type");
  }
  uint32_t in;
  TILEC_RETURN_IF_ERROR(Value(node.input(0), want, &in));
  fb::DType dtype;
  TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
  *id = NewOp(fb::OpKind::Cast, NodeName(node), {in}, t, want, dtype);
  return Status::Ok();
}

// A constant matrix as [rows, cols] floats, transposed if asked.
Status Importer::Matrix(const std::string& t, bool transpose,
                        std::vector<float>* m, int64_t* rows,
                        int64_t* cols) const {
  ConstPtr c;
  TILEC_RETURN_IF_ERROR(ConstantData(t, &c));
  if (c->shape.size() != 2) {
    return Status::Internal("'" + t + "' is not a matrix");
  }
  const int64_t r = c->shape[0], k = c->shape[1];
  m->resize(static_cast<size_t>(r * k));
  for (int64_t i = 0; i < r; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      (*m)[transpose ? j * r + i : i * k + j] =
          static_cast<float>(c->data[i * k + j]);
    }
  }
  *rows = transpose ? k : r;
  *cols = transpose ? r : k;
  return Status::Ok();
}

Status Importer::EmitMatMul(const NodeProto& node, const std::string& t,
                            uint32_t* id) {
  const Shape* as = ShapeOf(node.input(0));
  const Shape* bs = ShapeOf(node.input(1));
  if (as == nullptr || bs == nullptr || as->size() < 2 || bs->size() != 2) {
    return Unsupported(
        node, "a MatMul of " + ir::ShapeToString(as ? *as : Shape{}) +
                  " and " + ir::ShapeToString(bs ? *bs : Shape{}) +
                  ": tilec multiplies [rows, K] by a [K, N] matrix (a "
                  "batched product only inside the attention pattern)");
  }
  const int64_t k = bs->at(0), n = bs->at(1);
  if (as->back() != k) {
    return Status::BadInput(g_.model_name() + ": " + Label(node) +
                            ": inner dimensions differ: " +
                            ir::ShapeToString(*as) + " times " +
                            ir::ShapeToString(*bs));
  }
  TILEC_RETURN_IF_ERROR(CheckExtents(node.input(0), *as, &node));
  TILEC_RETURN_IF_ERROR(CheckExtents(node.input(1), *bs, &node));
  const int64_t rows = Elements(*as) / k;
  fb::DType dtype;
  TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
  uint32_t a, b;
  TILEC_RETURN_IF_ERROR(Value(node.input(0), {rows, k}, &a));
  TILEC_RETURN_IF_ERROR(Value(node.input(1), {k, n}, &b));
  *id =
      NewOp(fb::OpKind::MatMul, NodeName(node), {a, b}, t, {rows, n}, dtype);
  return Status::Ok();
}

// alpha * A' B' + beta * C with A an activation.
Status Importer::EmitGemm(const NodeProto& node, const std::string& t,
                          uint32_t* id) {
  const bool ta = IntAttribute(node, "transA", 0) != 0;
  const bool tb = IntAttribute(node, "transB", 0) != 0;
  const double alpha = FloatAttribute(node, "alpha", 1.0f);
  const double beta = FloatAttribute(node, "beta", 1.0f);
  // Gemm's inputs are matrices; shape inference knows the output only
  // when it knows them, but a declared output (value_info) need not.
  const Shape* as_known = ShapeOf(node.input(0));
  const Shape* out_known = ShapeOf(t);
  if (as_known == nullptr) return Unknown(node.input(0), "Gemm input");
  if (as_known->size() != 2 || out_known == nullptr ||
      out_known->size() != 2) {
    return Unsupported(node, "a Gemm of " + ir::ShapeToString(*as_known) +
                                 ": tilec multiplies matrices");
  }
  const Shape& out = *out_known;
  const int64_t m = out[0], n = out[1];
  const Shape& as = *as_known;
  const int64_t k = ta ? as[0] : as[1];
  fb::DType dtype;
  TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
  if (ta) {
    return Unsupported(node,
                       "transA=1 on an activation: tilec has no "
                       "transpose of a computed value");
  }
  const std::string name = NodeName(node);
  uint32_t a, b;
  TILEC_RETURN_IF_ERROR(Value(node.input(0), {m, k}, &a));
  bool alpha_done = alpha == 1.0;
  if (IsConstant(node.input(1))) {
    std::vector<float> w;
    int64_t rows = 0, cols = 0;
    TILEC_RETURN_IF_ERROR(Matrix(node.input(1), tb, &w, &rows, &cols));
    for (float& f : w) f = static_cast<float>(f * alpha);
    fb::DType wtype;
    TILEC_RETURN_IF_ERROR(DTypeOf(node.input(1), &wtype));
    b = NewWeight(node.input(1), {k, n}, w, wtype);
    alpha_done = true;
  } else if (tb) {
    return Unsupported(node,
                       "transB=1 on an activation: tilec has no "
                       "transpose of a computed value");
  } else {
    TILEC_RETURN_IF_ERROR(Value(node.input(1), {k, n}, &b));
  }
  const bool has_c =
      node.input_size() > 2 && !node.input(2).empty() && beta != 0.0;
  const std::string product = has_c || !alpha_done ? name + ".product" : t;
  uint32_t y =
      NewOp(fb::OpKind::MatMul, name, {a, b}, product, {m, n}, dtype);
  if (!alpha_done) {
    if (!has_c) {
      return EmitScaleValue(name + ".alpha", y, t, alpha, dtype, id);
    }
    TILEC_RETURN_IF_ERROR(EmitScaleValue(name + ".alpha", y, name + ".scaled",
                                         alpha, dtype, &y));
  }
  if (!has_c) {
    *id = y;
    return Status::Ok();
  }
  return EmitGemmBias(node, t, y, beta, m, n, dtype, id);
}

Status Importer::EmitScaleValue(const std::string& name, uint32_t x,
                                const std::string& result, double factor,
                                fb::DType dtype, uint32_t* id) {
  fb::OperationT* op = nullptr;
  *id = NewOp(fb::OpKind::Fused, name, {x}, result, values_[x]->shape, dtype,
              &op);
  auto step = std::make_unique<fb::FusedStepT>();
  step->kind = fb::FusedStepKind::Scale;
  step->scale = static_cast<float>(factor);
  step->dtype = dtype;
  op->body.push_back(std::move(step));
  return Status::Ok();
}

// + beta * C, C broadcast to [m, n]: a bias row, a full matrix, or a
// constant of any broadcastable shape expanded at import.
Status Importer::EmitGemmBias(const NodeProto& node, const std::string& t,
                              uint32_t y, double beta, int64_t m, int64_t n,
                              fb::DType dtype, uint32_t* id) {
  const std::string& c_name = node.input(2);
  if (ShapeOf(c_name) == nullptr) return Unknown(c_name, "tensor");
  const Shape& cs = *ShapeOf(c_name);
  const std::string name = NodeName(node);
  const bool row = StripOnes(cs) == Shape{n} || (n == 1 && Elements(cs) == 1);
  uint32_t c;
  if (IsConstant(c_name)) {
    ConstPtr cv;
    TILEC_RETURN_IF_ERROR(ConstantData(c_name, &cv));
    const Shape target = row ? Shape{n} : Shape{m, n};
    const Shape full = {m, n};
    std::vector<float> data(static_cast<size_t>(Elements(target)));
    // Broadcast C (rank <= 2) to the target by its right-aligned dims.
    Shape c2 = cs;
    while (c2.size() < 2) c2.insert(c2.begin(), 1);
    for (int64_t i = 0; i < Elements(target); ++i) {
      const int64_t r = row ? 0 : i / n, col = i % n;
      const int64_t src =
          (c2[0] == 1 ? 0 : r) * c2[1] + (c2[1] == 1 ? 0 : col);
      data[i] = static_cast<float>(cv->data[src] * beta);
    }
    fb::DType ctype;
    TILEC_RETURN_IF_ERROR(DTypeOf(c_name, &ctype));
    c = NewWeight(c_name, target, data, ctype);
    *id = NewOp(row ? fb::OpKind::BiasAdd : fb::OpKind::Add, name + ".bias",
                {y, c}, t, full, dtype);
    return Status::Ok();
  }
  if (!row && Elements(cs) != m * n) {
    return Unsupported(node, "C of shape " + ir::ShapeToString(cs) +
                                 " is a graph input broadcast to [" +
                                 std::to_string(m) + "," + std::to_string(n) +
                                 "]: tilec adds a computed value only as a "
                                 "[n] row (BiasAdd) or the whole [m, n] "
                                 "matrix (Add)");
  }
  TILEC_RETURN_IF_ERROR(Value(c_name, row ? Shape{n} : Shape{m, n}, &c));
  if (beta != 1.0) {
    TILEC_RETURN_IF_ERROR(EmitScaleValue(
        name + ".beta", c, name + ".c_scaled", beta, dtype, &c));
  }
  *id = NewOp(row ? fb::OpKind::BiasAdd : fb::OpKind::Add, name + ".bias",
              {y, c}, t, {m, n}, dtype);
  return Status::Ok();
}

}  // namespace tilec::passes::onnx_import
