#include "formats/op_shapes.h"

#include <string>

namespace tilec::ir {
namespace {

using Shape = std::vector<int64_t>;

std::string ShapeText(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

class Checker {
 public:
  Checker(const fb::OperationT& op, const std::vector<const fb::ValueT*>& in,
          const std::vector<const fb::ValueT*>& out)
      : op_(op), in_(in), out_(out) {}

  Status Fail(const std::string& what) const {
    return Status::BadInput("op (" + std::to_string(op_.id) + ") " +
                            fb::EnumNameOpKind(op_.kind) + ": " + what);
  }
  Status Arity(size_t operands, size_t results) const {
    if (in_.size() != operands || out_.size() != results) {
      return Fail("expects " + std::to_string(operands) + " operands and " +
                  std::to_string(results) + " results, has " +
                  std::to_string(in_.size()) + " and " +
                  std::to_string(out_.size()));
    }
    return Status::Ok();
  }
  const Shape& In(size_t i) const { return in_[i]->shape; }
  const Shape& Out(size_t i) const { return out_[i]->shape; }
  Status Expect(bool ok, const std::string& what) const {
    return ok ? Status::Ok() : Fail(what);
  }
  Status SameAs(const Shape& a, const Shape& b, const std::string& what) const {
    return Expect(a == b, what + " " + ShapeText(a) + " differs from " +
                              ShapeText(b));
  }

 private:
  const fb::OperationT& op_;
  const std::vector<const fb::ValueT*>& in_;
  const std::vector<const fb::ValueT*>& out_;
};

bool IsMatrix(const Shape& s) { return s.size() == 2; }

}  // namespace

Status CheckOpShapes(const fb::OperationT& op,
                     const std::vector<const fb::ValueT*>& operands,
                     const std::vector<const fb::ValueT*>& results) {
  Checker c(op, operands, results);
  switch (op.kind) {
    case fb::OpKind::LayerNorm: {
      TILEC_RETURN_IF_ERROR(c.Arity(3, 1));
      const Shape& x = c.In(0);
      TILEC_RETURN_IF_ERROR(c.Expect(IsMatrix(x), "input must be rank 2"));
      TILEC_RETURN_IF_ERROR(c.SameAs(c.In(1), {x[1]}, "gamma"));
      TILEC_RETURN_IF_ERROR(c.SameAs(c.In(2), {x[1]}, "beta"));
      return c.SameAs(c.Out(0), x, "result");
    }
    case fb::OpKind::MatMul: {
      TILEC_RETURN_IF_ERROR(c.Arity(2, 1));
      const Shape& a = c.In(0);
      const Shape& b = c.In(1);
      TILEC_RETURN_IF_ERROR(
          c.Expect(IsMatrix(a) && IsMatrix(b), "operands must be rank 2"));
      TILEC_RETURN_IF_ERROR(c.Expect(
          a[1] == b[0], "inner extents differ: " + ShapeText(a) + " x " +
                            ShapeText(b)));
      return c.SameAs(c.Out(0), {a[0], b[1]}, "result");
    }
    case fb::OpKind::BiasAdd: {
      TILEC_RETURN_IF_ERROR(c.Arity(2, 1));
      const Shape& x = c.In(0);
      TILEC_RETURN_IF_ERROR(c.Expect(IsMatrix(x), "input must be rank 2"));
      TILEC_RETURN_IF_ERROR(c.SameAs(c.In(1), {x[1]}, "bias"));
      return c.SameAs(c.Out(0), x, "result");
    }
    case fb::OpKind::Add: {
      TILEC_RETURN_IF_ERROR(c.Arity(2, 1));
      TILEC_RETURN_IF_ERROR(c.SameAs(c.In(1), c.In(0), "second operand"));
      return c.SameAs(c.Out(0), c.In(0), "result");
    }
    case fb::OpKind::Gelu:
    case fb::OpKind::Cast:
    case fb::OpKind::Softmax:
    case fb::OpKind::Redistribute:
      TILEC_RETURN_IF_ERROR(c.Arity(1, 1));
      return c.SameAs(c.Out(0), c.In(0), "result");
    case fb::OpKind::AttentionScores: {
      TILEC_RETURN_IF_ERROR(c.Arity(1, 1));
      const Shape& qkv = c.In(0);
      const Shape& s = c.Out(0);
      TILEC_RETURN_IF_ERROR(c.Expect(op.heads > 0 && op.head_dim > 0,
                                     "needs heads and head_dim"));
      TILEC_RETURN_IF_ERROR(c.Expect(
          IsMatrix(qkv) && qkv[1] == 3 * int64_t{op.heads} * op.head_dim,
          "qkv " + ShapeText(qkv) + " is not [rows, 3*heads*head_dim]"));
      TILEC_RETURN_IF_ERROR(c.Expect(
          s.size() == 4 && s[1] == op.heads && s[2] == s[3] &&
              s[0] * s[2] == qkv[0],
          "scores " + ShapeText(s) + " is not [batch, heads, tokens, tokens]"));
      return Status::Ok();
    }
    case fb::OpKind::AttentionContext: {
      TILEC_RETURN_IF_ERROR(c.Arity(2, 1));
      const Shape& p = c.In(0);
      const Shape& qkv = c.In(1);
      TILEC_RETURN_IF_ERROR(c.Expect(op.heads > 0 && op.head_dim > 0,
                                     "needs heads and head_dim"));
      TILEC_RETURN_IF_ERROR(c.Expect(
          p.size() == 4 && p[1] == op.heads && p[2] == p[3],
          "probabilities " + ShapeText(p) +
              " is not [batch, heads, tokens, tokens]"));
      TILEC_RETURN_IF_ERROR(c.Expect(
          IsMatrix(qkv) && qkv[0] == p[0] * p[2] &&
              qkv[1] == 3 * int64_t{op.heads} * op.head_dim,
          "qkv " + ShapeText(qkv) + " does not match the probabilities"));
      return c.SameAs(c.Out(0), {qkv[0], int64_t{op.heads} * op.head_dim},
                      "result");
    }
    case fb::OpKind::Fused: {
      TILEC_RETURN_IF_ERROR(c.Expect(!operands.empty() && !results.empty(),
                                     "needs operands and results"));
      for (const auto& step : op.body) {
        if (step && step->operand >= static_cast<int>(operands.size())) {
          return c.Fail("body step names operand " +
                        std::to_string(step->operand) + " of " +
                        std::to_string(operands.size()));
        }
      }
      return Status::Ok();
    }
    case fb::OpKind::Moments: {
      TILEC_RETURN_IF_ERROR(c.Expect(!operands.empty() && !results.empty(),
                                     "needs operands and results"));
      return Status::Ok();
    }
    case fb::OpKind::Normalize: {
      TILEC_RETURN_IF_ERROR(c.Expect(operands.size() >= 3 && results.size() == 1,
                                     "needs x, statistics, gamma, beta"));
      return c.SameAs(c.Out(0), c.In(0), "result");
    }
  }
  return c.Fail("unknown op kind");
}

}  // namespace tilec::ir
