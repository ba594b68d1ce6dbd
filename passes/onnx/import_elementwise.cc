#include "passes/onnx/import_elementwise.h"

#include <algorithm>
#include <utility>

#include "formats/op_shapes.h"

namespace tilec::passes {
namespace {

using Shape = std::vector<int64_t>;

int64_t Elements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Shape StripLeadingOnes(const Shape& s) {
  size_t i = 0;
  while (i < s.size() && s[i] == 1) ++i;
  return Shape(s.begin() + static_cast<std::ptrdiff_t>(i), s.end());
}

// Every dim but the last is 1: one row of the last dim's width.
bool IsRow(const Shape& s, int64_t width) {
  if (s.empty()) return width == 1;
  return s.back() == width && Elements(s) == width;
}

// One value per row: [..., rows, 1] with more than one row.
bool IsColumn(const Shape& s) {
  return s.size() >= 2 && s.back() == 1 && Elements(s) > 1;
}

// A column of `out`'s rows: `s` broadcasts to `out` along the last axis
// only ([B, T, 1] or [T, 1] against [B, T, D]; not [T, 1] against
// [B, T, D], which repeats over the batch).
bool IsRowsColumn(const Shape& s, const Shape& out) {
  if (!IsColumn(s) || out.size() < 2) return false;
  return Elements(s) * out.back() == Elements(out) &&
         StripLeadingOnes(Shape(s.begin(), s.end() - 1)) ==
             StripLeadingOnes(Shape(out.begin(), out.end() - 1));
}

bool Commutes(fb::ElementwiseFn fn) {
  return fn == fb::ElementwiseFn::Add || fn == fb::ElementwiseFn::Mul;
}

// How `other` lays against a full-size running value of shape `out`.
StatusOr<ElementwiseMatch> Against(const Shape& out,
                                   const ElementwiseInput& other) {
  ElementwiseMatch m;
  const int64_t width = out.empty() ? 1 : out.back();
  if (Elements(other.shape) == Elements(out)) return m;
  if (other.scalar.has_value()) {
    m.broadcast = fb::Broadcast::Row;
    m.scalar = other.scalar;
    return m;
  }
  if (IsRow(other.shape, width)) {
    if (!other.parameter) {
      return Status::Infeasible(
          "a computed row " + ir::ShapeToString(other.shape) +
          " broadcast down the rows (tilec reads a per-column operand only "
          "from a graph input or constant)");
    }
    m.broadcast = fb::Broadcast::Row;
    return m;
  }
  if (Elements(other.shape) == 1) {
    return Status::Infeasible(
        "a scalar that is not a constant broadcast over " +
        ir::ShapeToString(out) +
        " (tilec broadcasts a constant scalar, a row, a column of its rows or "
        "a same-shape tensor)");
  }
  // Any column, computed ones too: the planner redistributes a computed
  // column into the per-row slot as it would any value (docs/lowering.md).
  if (IsRowsColumn(other.shape, out)) {
    m.broadcast = fb::Broadcast::Column;
    return m;
  }
  return Status::Infeasible(
      "it broadcasts " + ir::ShapeToString(other.shape) + " to " +
      ir::ShapeToString(out) +
      " (tilec broadcasts a constant scalar, a row, a column of its rows or "
      "a same-shape tensor)");
}

}  // namespace

std::optional<fb::ElementwiseFn> ElementwiseFnOf(const std::string& op_type) {
  static const std::pair<const char*, fb::ElementwiseFn> kOps[] = {
      {"Add", fb::ElementwiseFn::Add},   {"Sub", fb::ElementwiseFn::Sub},
      {"Mul", fb::ElementwiseFn::Mul},   {"Div", fb::ElementwiseFn::Div},
      {"Pow", fb::ElementwiseFn::Pow},   {"Sqrt", fb::ElementwiseFn::Sqrt},
      {"Tanh", fb::ElementwiseFn::Tanh}, {"Erf", fb::ElementwiseFn::Erf},
      {"Sigmoid", fb::ElementwiseFn::Sigmoid},
      {"Relu", fb::ElementwiseFn::Relu},
  };
  for (const auto& [name, fn] : kOps) {
    if (op_type == name) return fn;
  }
  return std::nullopt;
}

StatusOr<ElementwiseMatch> MatchElementwise(
    const std::string& op_type, const Shape& out,
    const std::vector<ElementwiseInput>& inputs) {
  const std::optional<fb::ElementwiseFn> fn = ElementwiseFnOf(op_type);
  if (!fn.has_value()) {
    return Status::Infeasible(op_type + " is not a general elementwise op");
  }
  const size_t arity = fb::ElementwiseFn::Sqrt <= *fn ? 1 : 2;
  if (inputs.size() != arity) {
    return Status::Infeasible(op_type + " with " +
                              std::to_string(inputs.size()) + " inputs");
  }
  if (arity == 1) {
    ElementwiseMatch m;
    m.fn = *fn;
    return m;
  }
  // The running value is the full-size input, the first one when both are.
  Status refusal = Status::Infeasible(
      "neither input has the output's shape " + ir::ShapeToString(out) +
      " (tilec broadcasts one input against the other, not both)");
  for (int side = 0; side < 2; ++side) {
    if (Elements(inputs[side].shape) != Elements(out)) continue;
    StatusOr<ElementwiseMatch> m = Against(out, inputs[1 - side]);
    if (!m.ok()) {
      refusal = m.status();
      continue;
    }
    m->fn = *fn;
    m->running = side;
    m->other = 1 - side;
    m->operand_first = side == 1 && !Commutes(*fn);
    return m;
  }
  return refusal;
}

}  // namespace tilec::passes
