// General elementwise kernels: unary and binary functions (fb::ElementwiseFn)
// and a multiply by a constant.

#include <cmath>

#include "kernels/kernel_names.h"
#include "kernels/kernels.h"

namespace tilec::kernels {
namespace {

// The charged element count of a [rows, w] call (the vector tail rule).
StatusOr<int64_t> ChargedElements(const CostModel& model,
                                  std::string_view formula, int64_t rows,
                                  int64_t w) {
  StatusOr<size_t> n =
      ElementCount(formula, {rows, RoundUpToGroup(w, model.vector_elements())});
  if (!n.ok()) return n.status();
  return static_cast<int64_t>(*n);
}

StatusOr<int64_t> FormulaCycles(const CostModel& model,
                                std::string_view formula, int64_t rows,
                                int64_t w, KernelPath path) {
  StatusOr<int64_t> n = ChargedElements(model, formula, rows, w);
  if (!n.ok()) return n.status();
  return model.Cycles(formula, {{"n", *n}}, path);
}

// How many calls' worth of the `gelu` formula (a transcendental function
// per element) and of the `add` formula (one vector operation per group)
// `fn` costs: docs/lowering.md, "General elementwise kernels".
struct FnWork {
  int transcendental;
  int vector_ops;
};

FnWork WorkOf(fb::ElementwiseFn fn) {
  switch (fn) {
    case fb::ElementwiseFn::Add:
    case fb::ElementwiseFn::Sub:
    case fb::ElementwiseFn::Mul:
    case fb::ElementwiseFn::Relu:
      return {0, 1};
    case fb::ElementwiseFn::Div:  // a reciprocal, then a multiply
      return {1, 1};
    case fb::ElementwiseFn::Pow:  // exp(b * ln a)
      return {2, 1};
    case fb::ElementwiseFn::Sqrt:
    case fb::ElementwiseFn::Tanh:
    case fb::ElementwiseFn::Erf:
    case fb::ElementwiseFn::Sigmoid:
      return {1, 0};
  }
  return {0, 0};  // unreachable: callers check fn with ElementwiseFnFromInt
}

Status CheckArity(std::string_view kernel, fb::ElementwiseFn fn, bool unary) {
  if (IsUnaryFn(fn) == unary) return Status::Ok();
  return Status::BadInput(std::string(kernel) + ": " +
                          fb::EnumNameElementwiseFn(fn) + " is " +
                          (unary ? "binary" : "unary"));
}

}  // namespace

StatusOr<fb::ElementwiseFn> ElementwiseFnFromInt(int64_t fn) {
  if (fn < static_cast<int64_t>(fb::ElementwiseFn::MIN) ||
      fn > static_cast<int64_t>(fb::ElementwiseFn::MAX)) {
    return Status::BadInput("unknown elementwise function " +
                            std::to_string(fn) + " (0 add ... 9 relu)");
  }
  return static_cast<fb::ElementwiseFn>(fn);
}

bool IsUnaryFn(fb::ElementwiseFn fn) {
  return fn >= fb::ElementwiseFn::Sqrt;
}

float ApplyUnary(fb::ElementwiseFn fn, float x) {
  switch (fn) {
    case fb::ElementwiseFn::Sqrt:
      return std::sqrt(x);
    case fb::ElementwiseFn::Tanh:
      return std::tanh(x);
    case fb::ElementwiseFn::Erf:
      return std::erf(x);
    case fb::ElementwiseFn::Sigmoid:
      return 1.0f / (1.0f + std::exp(-x));
    case fb::ElementwiseFn::Relu:
      // NaN stays NaN, as ONNX's max(x, 0) of a NaN.
      return x < 0.0f ? 0.0f : x;
    default:
      return x;  // unreachable: binary functions are refused by CheckArity
  }
}

float ApplyBinary(fb::ElementwiseFn fn, float a, float b) {
  switch (fn) {
    case fb::ElementwiseFn::Add:
      return a + b;
    case fb::ElementwiseFn::Sub:
      return a - b;
    case fb::ElementwiseFn::Mul:
      return a * b;
    case fb::ElementwiseFn::Div:
      return a / b;
    case fb::ElementwiseFn::Pow:
      return std::pow(a, b);
    default:
      return a;  // unreachable: unary functions are refused by CheckArity
  }
}

Status Unary(const Operand& x, const Operand& out, int64_t rows, int64_t w,
             fb::ElementwiseFn fn) {
  constexpr std::string_view kName = names::kUnary;
  TILEC_RETURN_IF_ERROR(CheckArity(kName, fn, /*unary=*/true));
  StatusOr<size_t> elems = ElementCount(kName, {rows, w});
  if (!elems.ok()) return elems.status();
  TILEC_RETURN_IF_ERROR(CheckOperand(kName, "x", x, *elems));
  TILEC_RETURN_IF_ERROR(CheckOperand(kName, "out", out, *elems));
  std::vector<float> v = LoadElements(x, *elems);
  for (float& e : v) e = ApplyUnary(fn, e);
  StoreElements(out, v);
  return Status::Ok();
}

Status Binary(const Operand& x, const Operand& y, const Operand& out,
              int64_t rows, int64_t w, fb::ElementwiseFn fn, bool operand_first,
              fb::Broadcast broadcast) {
  const bool row = broadcast == fb::Broadcast::Row;
  const bool column = broadcast == fb::Broadcast::Column;
  const std::string_view name = row      ? names::kBinaryRow
                                : column ? names::kBinaryCol
                                         : names::kBinary;
  TILEC_RETURN_IF_ERROR(CheckArity(name, fn, /*unary=*/false));
  StatusOr<size_t> elems = ElementCount(name, {rows, w});
  if (!elems.ok()) return elems.status();
  const size_t y_elems = row      ? static_cast<size_t>(w)
                         : column ? static_cast<size_t>(rows)
                                  : *elems;
  TILEC_RETURN_IF_ERROR(CheckOperand(name, "x", x, *elems));
  TILEC_RETURN_IF_ERROR(CheckOperand(name,
                                     row      ? "row"
                                     : column ? "col"
                                              : "y",
                                     y, y_elems));
  TILEC_RETURN_IF_ERROR(CheckOperand(name, "out", out, *elems));
  std::vector<float> v = LoadElements(x, *elems);
  const std::vector<float> yf = LoadElements(y, y_elems);
  const size_t width = static_cast<size_t>(w);
  // Row by row: the other operand's index without a division per element.
  for (size_t r = 0, first = 0; first < v.size(); ++r, first += width) {
    for (size_t c = 0; c < width; ++c) {
      const float b = yf[row ? c : column ? r : first + c];
      float& e = v[first + c];
      e = operand_first ? ApplyBinary(fn, b, e) : ApplyBinary(fn, e, b);
    }
  }
  StoreElements(out, v);
  return Status::Ok();
}

Status ScaleKernel(const Operand& x, const Operand& out, int64_t rows,
                   int64_t w, float scale) {
  constexpr std::string_view kName = names::kScale;
  StatusOr<size_t> elems = ElementCount(kName, {rows, w});
  if (!elems.ok()) return elems.status();
  TILEC_RETURN_IF_ERROR(CheckOperand(kName, "x", x, *elems));
  TILEC_RETURN_IF_ERROR(CheckOperand(kName, "out", out, *elems));
  std::vector<float> v = LoadElements(x, *elems);
  for (float& e : v) e *= scale;
  StoreElements(out, v);
  return Status::Ok();
}

StatusOr<int64_t> ElementwiseCycles(const CostModel& model,
                                    fb::ElementwiseFn fn, int64_t rows,
                                    int64_t w, KernelPath path) {
  const FnWork work = WorkOf(fn);
  int64_t total = 0;
  if (work.transcendental > 0) {
    StatusOr<int64_t> c =
        FormulaCycles(model, formula::kGelu, rows, w, KernelPath::kFast);
    if (!c.ok()) return c.status();
    total += work.transcendental * *c;
  }
  if (work.vector_ops > 0) {
    StatusOr<int64_t> c = FormulaCycles(model, formula::kAdd, rows, w, path);
    if (!c.ok()) return c.status();
    total += work.vector_ops * *c;
  }
  return total;
}

}  // namespace tilec::kernels
