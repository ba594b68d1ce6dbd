// The arithmetic constant folding computes in (onnx_infer.h): ONNX's
// elementwise ops on doubles, rounding to a tensor's type, broadcasting,
// and folded values read as integers.

#include "passes/onnx/onnx_infer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/numerics.h"

namespace tilec::passes::onnx_infer {

using ::onnx::TensorProto;

// Rounds a folded number to what a tensor of `type` holds.
double RoundTo(int32_t type, double v) {
  switch (type) {
    case TensorProto::FLOAT:
      return static_cast<float>(v);
    case TensorProto::FLOAT16:
      return kernels::RoundToF16(static_cast<float>(v));
    case TensorProto::BFLOAT16:
      return kernels::RoundToBf16(static_cast<float>(v));
    case TensorProto::DOUBLE:
      return v;
    case TensorProto::BOOL:
      return v != 0 ? 1 : 0;
    default:  // integers truncate toward zero, as numpy's astype
      return std::isfinite(v) ? std::trunc(v) : 0;
  }
}

std::optional<Shape> Broadcast(const std::vector<const Shape*>& shapes) {
  size_t rank = 0;
  for (const Shape* s : shapes) rank = std::max(rank, s->size());
  Shape out(rank, 1);
  for (const Shape* s : shapes) {
    for (size_t i = 0; i < s->size(); ++i) {
      const size_t o = rank - s->size() + i;
      const int64_t d = (*s)[i];
      if (d == out[o] || d == 1) continue;
      if (out[o] != 1) return std::nullopt;
      out[o] = d;
    }
  }
  return out;
}

// Row-major index of `out_index` in a tensor of `shape` broadcast to `out`.
int64_t BroadcastIndex(const Shape& shape, const Shape& out, int64_t flat) {
  int64_t index = 0, stride = 1;
  for (size_t i = out.size(); i-- > 0;) {
    const int64_t coord = flat % out[i];
    flat /= out[i];
    const size_t rank = shape.size();
    const size_t offset = out.size() - rank;
    if (i >= offset) {
      const int64_t d = shape[i - offset];
      if (d != 1) index += coord * stride;
      stride *= d;
    }
  }
  return index;
}

std::optional<double> Binary(const std::string& op, double a, double b,
                             int32_t type) {
  const bool integer = !IsOnnxFloatType(type) && type != TensorProto::BOOL;
  if (op == "Add") return a + b;
  if (op == "Sub") return a - b;
  if (op == "Mul") return a * b;
  if (op == "Div") {
    if (integer) return b == 0 ? std::optional<double>() : std::trunc(a / b);
    return a / b;
  }
  if (op == "Pow") return std::pow(a, b);
  if (op == "Max") return std::max(a, b);
  if (op == "Min") return std::min(a, b);
  if (op == "Mod") return b == 0 ? std::optional<double>() : std::fmod(a, b);
  if (op == "Equal") return a == b ? 1.0 : 0.0;
  if (op == "Less") return a < b ? 1.0 : 0.0;
  if (op == "Greater") return a > b ? 1.0 : 0.0;
  if (op == "And") return (a != 0 && b != 0) ? 1.0 : 0.0;
  if (op == "Or") return (a != 0 || b != 0) ? 1.0 : 0.0;
  return std::nullopt;
}

std::optional<double> Unary(const std::string& op, double x) {
  if (op == "Identity") return x;
  if (op == "Neg") return -x;
  if (op == "Sqrt") return std::sqrt(x);
  if (op == "Reciprocal") return 1.0 / x;
  if (op == "Exp") return std::exp(x);
  if (op == "Erf") return std::erf(x);
  if (op == "Tanh") return std::tanh(x);
  if (op == "Abs") return std::abs(x);
  if (op == "Floor") return std::floor(x);
  if (op == "Ceil") return std::ceil(x);
  if (op == "Sigmoid") return 1.0 / (1.0 + std::exp(-x));
  if (op == "Not") return x == 0 ? 1.0 : 0.0;
  return std::nullopt;
}

bool IsBinary(const std::string& op) {
  static const char* kOps[] = {"Add",     "Sub", "Mul", "Div",   "Pow",
                               "Max",     "Min", "Mod", "Equal", "Less",
                               "Greater", "And", "Or"};
  return std::any_of(std::begin(kOps), std::end(kOps),
                     [&](const char* k) { return op == k; });
}

bool IsComparison(const std::string& op) {
  return op == "Equal" || op == "Less" || op == "Greater" || op == "And" ||
         op == "Or" || op == "Not";
}

// Ops whose output has the shape and type of input 0.
bool IsShapePreserving(const std::string& op) {
  static const char* kOps[] = {
      "Identity", "Neg", "Sqrt",    "Reciprocal", "Exp",        "Erf",
      "Tanh",     "Abs", "Floor",   "Ceil",       "Sigmoid",    "Relu",
      "Softmax",  "Not", "Dropout", "LogSoftmax", "HardSigmoid"};
  return std::any_of(std::begin(kOps), std::end(kOps),
                     [&](const char* k) { return op == k; });
}

// Folded values are doubles: one beyond int64's range saturates (NaN is 0)
// rather than overflow the conversion; every caller refuses such a shape,
// index or axis by its own checks.
std::vector<int64_t> AsInts(const OnnxConstant& c) {
  constexpr double kLimit = 9223372036854775807.0;  // 2^63, as a double
  std::vector<int64_t> out;
  out.reserve(c.data.size());
  for (double d : c.data) {
    if (std::isnan(d)) {
      out.push_back(0);
    } else if (d >= kLimit) {
      out.push_back(std::numeric_limits<int64_t>::max());
    } else if (d <= -kLimit) {
      out.push_back(std::numeric_limits<int64_t>::min());
    } else {
      out.push_back(static_cast<int64_t>(d));
    }
  }
  return out;
}

}  // namespace tilec::passes::onnx_infer
