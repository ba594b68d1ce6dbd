// The importer's LayerNorm, GELU and Softmax patterns (importer.h): each
// as its ONNX op and in the decomposed forms exporters write (mean and
// variance, erf, tanh and sigmoid GELU, exp over a sum), matched from the
// tensor back and emitted as one tilec op.

#include "passes/onnx/importer.h"

#include <algorithm>
#include <cmath>

namespace tilec::passes::onnx_import {

// var(x) over `axes` as exporters write it: mean((x - mean)^2) with Pow
// or Mul, or mean(x*x) - mean(x)^2 (ONNX's LayerNormalization function).
bool Importer::MatchVariance(const std::string& var, const std::string& x,
                             const std::vector<int64_t>& axes) const {
  auto is_square_of = [&](const std::string& t, auto&& base_ok) {
    const NodeProto* n = Node(PeelCasts(t));
    if (n == nullptr) return false;
    double e = 0;
    if (n->op_type() == "Pow") {
      return Scalar(n->input(1), &e) && e == 2.0 && base_ok(n->input(0));
    }
    if (n->op_type() == "Mul") {
      return Same(n->input(0), n->input(1)) && base_ok(n->input(0));
    }
    return false;
  };
  auto is_deviation = [&](const std::string& d) {
    std::string dx;
    std::vector<int64_t> daxes;
    return MatchDeviation(d, &dx, &daxes) && Same(dx, x) && daxes == axes;
  };
  auto is_mean_of = [&](const std::string& t, auto&& inner_ok) {
    const NodeProto* n = NodeIs(t, "ReduceMean");
    return n != nullptr && ReduceAxes(*n) == axes && inner_ok(n->input(0));
  };
  if (is_mean_of(var, [&](const std::string& sq) {
        return is_square_of(sq, is_deviation);
      })) {
    return true;
  }
  const NodeProto* sub = NodeIs(var, "Sub");
  if (sub == nullptr) return false;
  auto is_x = [&](const std::string& t) { return Same(t, x); };
  return is_mean_of(
             sub->input(0),
             [&](const std::string& sq) { return is_square_of(sq, is_x); }) &&
         is_square_of(sub->input(1), [&](const std::string& m) {
           return is_mean_of(m, is_x);
         });
}

// The reduced axes of a ReduceMean with keepdims, normalized, sorted;
// empty when they are not given as constants.
std::vector<int64_t> Importer::ReduceAxes(const NodeProto& n) const {
  if (IntAttribute(n, "keepdims", 1) == 0) return {};
  std::vector<int64_t> axes = IntsAttribute(n, "axes");
  const Shape* s = ShapeOf(n.input(0));
  if (s == nullptr || axes.empty()) return {};
  for (int64_t& a : axes) {
    if (!NormalizeAxis(a, static_cast<int64_t>(s->size()), &a)) return {};
  }
  std::sort(axes.begin(), axes.end());
  return axes;
}

// d = x - ReduceMean(x) over trailing axes.
bool Importer::MatchDeviation(const std::string& d, std::string* x,
                              std::vector<int64_t>* axes) const {
  const NodeProto* sub = NodeIs(d, "Sub");
  if (sub == nullptr) return false;
  const NodeProto* mean = NodeIs(sub->input(1), "ReduceMean");
  if (mean == nullptr || !Same(mean->input(0), sub->input(0))) return false;
  *axes = ReduceAxes(*mean);
  const Shape* s = ShapeOf(mean->input(0));
  if (axes->empty() || s == nullptr) return false;
  for (size_t i = 0; i < axes->size(); ++i) {
    if ((*axes)[axes->size() - 1 - i] !=
        static_cast<int64_t>(s->size() - 1 - i)) {
      return false;  // not the trailing axes
    }
  }
  *x = mean->input(0);
  return true;
}

// (x - mean) / sqrt(var + eps), also as a product with 1/sqrt or
// Reciprocal(Sqrt(...)).
bool Importer::MatchNormalized(const std::string& t, LayerNormMatch* m) const {
  const NodeProto* n = Node(PeelCasts(t));
  if (n == nullptr) return false;
  auto match_std = [&](const std::string& s, bool inverse, std::string* dev) {
    std::string sq = s;
    if (inverse) {
      const NodeProto* r = NodeIs(s, "Reciprocal");
      if (r == nullptr) return false;
      sq = r->input(0);
    }
    const NodeProto* sqrt = NodeIs(sq, "Sqrt");
    if (sqrt == nullptr) return false;
    const NodeProto* add = NodeIs(sqrt->input(0), "Add");
    if (add == nullptr) return false;
    for (int side = 0; side < 2; ++side) {
      double eps = 0;
      if (!Scalar(add->input(side), &eps)) continue;
      std::string x;
      std::vector<int64_t> axes;
      if (!MatchDeviation(*dev, &x, &axes)) return false;
      if (!MatchVariance(add->input(1 - side), x, axes)) return false;
      const Shape& xs = *ShapeOf(x);
      m->x = x;
      m->width = Product(xs, axes.front(), xs.size());
      m->eps = eps;
      return true;
    }
    return false;
  };
  if (n->op_type() == "Div") {
    std::string dev = n->input(0);
    return match_std(n->input(1), false, &dev);
  }
  if (n->op_type() == "Mul") {
    for (int side = 0; side < 2; ++side) {
      std::string dev = n->input(side);
      if (match_std(n->input(1 - side), true, &dev)) return true;
    }
  }
  return false;
}

Shape Importer::Trailing(const LayerNormMatch& m) const { return {m.width}; }

bool Importer::MatchScaled(const std::string& t, LayerNormMatch* m) const {
  if (MatchNormalized(t, m)) return true;
  const NodeProto* mul = NodeIs(t, "Mul");
  if (mul == nullptr) return false;
  for (int side = 0; side < 2; ++side) {
    if (MatchNormalized(mul->input(1 - side), m) &&
        IsRowParam(mul->input(side), TrailingDims(*m))) {
      m->gamma = mul->input(side);
      return true;
    }
  }
  return false;
}

// The normalized dims of x, for comparing gamma and beta shapes.
Shape Importer::TrailingDims(const LayerNormMatch& m) const {
  const Shape& xs = *ShapeOf(m.x);
  int64_t acc = 1;
  size_t i = xs.size();
  while (i > 0 && acc < m.width) acc *= xs[--i];
  return Shape(xs.begin() + i, xs.end());
}

bool Importer::MatchLayerNorm(const std::string& t, LayerNormMatch* m) const {
  const NodeProto* n = Node(PeelCasts(t));
  if (n == nullptr) return false;
  if (n->op_type() == "LayerNormalization") {
    const Shape* xs = ShapeOf(n->input(0));
    int64_t axis = 0;
    if (xs == nullptr ||
        !NormalizeAxis(IntAttribute(*n, "axis", -1),
                       static_cast<int64_t>(xs->size()), &axis)) {
      return false;
    }
    m->x = n->input(0);
    m->width = Product(*xs, axis, xs->size());
    m->eps = FloatAttribute(*n, "epsilon", 1e-5f);
    const Shape trailing(xs->begin() + axis, xs->end());
    if (!IsRowParam(n->input(1), trailing)) return false;
    m->gamma = n->input(1);
    if (n->input_size() > 2 && !n->input(2).empty()) {
      if (!IsRowParam(n->input(2), trailing)) return false;
      m->beta = n->input(2);
    }
    return true;
  }
  if (n->op_type() == "Add") {
    for (int side = 0; side < 2; ++side) {
      LayerNormMatch inner;
      if (MatchScaled(n->input(1 - side), &inner) &&
          IsRowParam(n->input(side), TrailingDims(inner))) {
        *m = inner;
        m->beta = n->input(side);
        return true;
      }
    }
    return false;
  }
  return MatchScaled(t, m);
}

Status Importer::EmitLayerNorm(const NodeProto& node, const std::string& t,
                               const LayerNormMatch& m, uint32_t* id) {
  const Shape& xs = *ShapeOf(m.x);
  const int64_t rows = Elements(xs) / m.width;
  uint32_t x, gamma, beta;
  TILEC_RETURN_IF_ERROR(Value(m.x, {rows, m.width}, &x));
  fb::DType dtype;
  TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
  if (m.gamma.empty()) {
    gamma = NewWeight(NodeName(node) + ".gamma", {m.width},
                      std::vector<float>(m.width, 1.0f), dtype);
  } else {
    TILEC_RETURN_IF_ERROR(RowParam(m.gamma, m.width, &gamma));
  }
  if (m.beta.empty()) {
    beta = NewWeight(NodeName(node) + ".beta", {m.width},
                     std::vector<float>(m.width, 0.0f), dtype);
  } else {
    TILEC_RETURN_IF_ERROR(RowParam(m.beta, m.width, &beta));
  }
  fb::OperationT* op = nullptr;
  *id = NewOp(fb::OpKind::LayerNorm, NodeName(node), {x, gamma, beta}, t,
              {rows, m.width}, dtype, &op);
  op->eps = static_cast<float>(m.eps);
  return Status::Ok();
}

// A polynomial in x of small degree built from Add, Sub, Mul, Div by a
// constant and Pow with a constant integer exponent.
bool Importer::MatchPoly(const std::string& t, const std::string& x, Poly* p,
                         int depth) const {
  if (depth > 12) return false;
  if (Same(t, x)) {
    *p = {{1, 1.0}};
    return true;
  }
  double c = 0;
  if (Scalar(t, &c)) {
    *p = {{0, c}};
    return true;
  }
  const NodeProto* n = Node(PeelCasts(t));
  if (n == nullptr || n->input_size() < 2) return false;
  const std::string& op = n->op_type();
  Poly a, b;
  if (op == "Pow") {
    double e = 0;
    if (!Scalar(n->input(1), &e) || e != std::floor(e) || e < 1 || e > 4 ||
        !MatchPoly(n->input(0), x, &a, depth + 1)) {
      return false;
    }
    Poly r = {{0, 1.0}};
    for (int i = 0; i < static_cast<int>(e); ++i) r = Multiply(r, a);
    *p = r;
    return true;
  }
  if (!MatchPoly(n->input(0), x, &a, depth + 1)) return false;
  if (op == "Div") {
    if (!Scalar(n->input(1), &c) || c == 0) return false;
    for (auto& [deg, coef] : a) coef /= c;
    *p = a;
    return true;
  }
  if (!MatchPoly(n->input(1), x, &b, depth + 1)) return false;
  if (op == "Mul") {
    *p = Multiply(a, b);
    return true;
  }
  if (op == "Add" || op == "Sub") {
    for (const auto& [deg, coef] : b) a[deg] += op == "Add" ? coef : -coef;
    *p = a;
    return true;
  }
  return false;
}

Poly Importer::Multiply(const Poly& a, const Poly& b) {
  Poly r;
  for (const auto& [da, ca] : a) {
    for (const auto& [db, cb] : b) r[da + db] += ca * cb;
  }
  return r;
}

bool Importer::PolyIs(const Poly& p, const Poly& expected) {
  for (const auto& [deg, coef] : p) {
    auto it = expected.find(deg);
    if (it == expected.end() ? coef != 0 : !Near(coef, it->second)) {
      return false;
    }
  }
  for (const auto& [deg, coef] : expected) {
    if (!p.count(deg)) return false;
  }
  return true;
}

// The factors of a product tree (Mul, Div by a constant): constants
// multiplied into *c, the rest listed.
void Importer::Factors(const std::string& t, double* c,
                       std::vector<std::string>* rest) const {
  double v = 0;
  if (Scalar(t, &v)) {
    *c *= v;
    return;
  }
  const NodeProto* n = Node(PeelCasts(t));
  if (n != nullptr && n->op_type() == "Mul") {
    Factors(n->input(0), c, rest);
    Factors(n->input(1), c, rest);
    return;
  }
  if (n != nullptr && n->op_type() == "Div" && Scalar(n->input(1), &v) &&
      v != 0) {
    *c /= v;
    Factors(n->input(0), c, rest);
    return;
  }
  rest->push_back(t);
}

// 0.5 * x * (1 + erf(x / sqrt(2))), 0.5 * x * (1 + tanh(sqrt(2/pi) *
// (x + 0.044715 x^3))), x * sigmoid(1.702 x); factors in any order.
bool Importer::MatchGelu(const std::string& t, fb::GeluForm* form,
                         std::string* x) const {
  double c = 1.0;
  std::vector<std::string> f;
  Factors(t, &c, &f);
  if (f.size() != 2) return false;
  for (int side = 0; side < 2; ++side) {
    const std::string& cand = f[side];
    const std::string& other = f[1 - side];
    if (const NodeProto* sig = NodeIs(other, "Sigmoid")) {
      Poly p;
      if (Near(c, 1.0) && MatchPoly(sig->input(0), cand, &p) &&
          PolyIs(p, {{1, 1.702}})) {
        *form = fb::GeluForm::Quick;
        *x = cand;
        return true;
      }
      continue;
    }
    const NodeProto* add = NodeIs(other, "Add");
    if (add == nullptr || !Near(c, 0.5)) continue;
    for (int s = 0; s < 2; ++s) {
      double one = 0;
      if (!Scalar(add->input(s), &one) || one != 1.0) continue;
      const std::string inner = add->input(1 - s);
      Poly p;
      if (const NodeProto* erf = NodeIs(inner, "Erf")) {
        if (MatchPoly(erf->input(0), cand, &p) &&
            PolyIs(p, {{1, 1.0 / std::sqrt(2.0)}})) {
          *form = fb::GeluForm::Erf;
          *x = cand;
          return true;
        }
      } else if (const NodeProto* tanh = NodeIs(inner, "Tanh")) {
        const double k = std::sqrt(2.0 / M_PI);
        if (MatchPoly(tanh->input(0), cand, &p) &&
            PolyIs(p, {{1, k}, {3, k * 0.044715}})) {
          *form = fb::GeluForm::Tanh;
          *x = cand;
          return true;
        }
      }
    }
  }
  return false;
}

Status Importer::EmitGelu(const NodeProto& node, const std::string& t,
                          const std::string& x, fb::GeluForm form,
                          uint32_t* id) {
  const Shape view = View2D(*ShapeOf(t));
  uint32_t in;
  TILEC_RETURN_IF_ERROR(Value(x, view, &in));
  fb::DType dtype;
  TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
  fb::OperationT* op = nullptr;
  *id = NewOp(fb::OpKind::Gelu, NodeName(node), {in}, t, view, dtype, &op);
  op->gelu = form;
  mlp_width_ = view[1];
  return Status::Ok();
}

bool Importer::IsLastAxis(const std::vector<int64_t>& axes, size_t rank) {
  return axes.size() == 1 && axes[0] == static_cast<int64_t>(rank) - 1;
}

std::vector<int64_t> Importer::AxesOf(const NodeProto& n) const {
  std::vector<int64_t> axes = IntsAttribute(n, "axes");
  if (n.input_size() > 1 && !n.input(1).empty()) {
    ConstPtr c;
    if (!g_.Constant(n.input(1), &c).ok() || c == nullptr) return {};
    axes.clear();
    for (double d : c->data) axes.push_back(static_cast<int64_t>(d));
  }
  const Shape* s = ShapeOf(n.input(0));
  if (s == nullptr) return {};
  for (int64_t& a : axes) {
    if (!NormalizeAxis(a, static_cast<int64_t>(s->size()), &a)) return {};
  }
  return axes;
}

// exp(x - max(x)) / sum(exp(x - max(x))) over the last axis (the max may
// be missing).
bool Importer::MatchSoftmaxExpanded(const NodeProto& div,
                                    std::string* x) const {
  const NodeProto* exp = NodeIs(div.input(0), "Exp");
  const NodeProto* sum = NodeIs(div.input(1), "ReduceSum");
  if (exp == nullptr || sum == nullptr ||
      !Same(sum->input(0), div.input(0)) ||
      IntAttribute(*sum, "keepdims", 1) == 0) {
    return false;
  }
  const Shape* s = ShapeOf(exp->input(0));
  if (s == nullptr || !IsLastAxis(AxesOf(*sum), s->size())) return false;
  *x = exp->input(0);
  if (const NodeProto* sub = NodeIs(exp->input(0), "Sub")) {
    const NodeProto* max = NodeIs(sub->input(1), "ReduceMax");
    if (max != nullptr && Same(max->input(0), sub->input(0)) &&
        IntAttribute(*max, "keepdims", 1) != 0 &&
        IsLastAxis(AxesOf(*max), s->size())) {
      *x = sub->input(0);
    }
  }
  return true;
}

Status Importer::EmitSoftmaxOf(const NodeProto& node, const std::string& t,
                               const std::string& x, uint32_t* id) {
  const Shape view = View2D(*ShapeOf(t));
  uint32_t in;
  TILEC_RETURN_IF_ERROR(Value(x, view, &in));
  fb::DType dtype;
  TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
  *id = NewOp(fb::OpKind::Softmax, NodeName(node), {in}, t, view, dtype);
  return Status::Ok();
}

Status Importer::EmitSoftmax(const NodeProto& node, const std::string& t,
                             uint32_t* id) {
  const Shape& s = *ShapeOf(t);
  int64_t axis = 0;
  if (!NormalizeAxis(IntAttribute(node, "axis", -1),
                     static_cast<int64_t>(s.size()), &axis) ||
      axis != static_cast<int64_t>(s.size()) - 1) {
    return Unsupported(node,
                       "softmax over axis " +
                           std::to_string(IntAttribute(node, "axis", -1)) +
                           " of a rank-" + std::to_string(s.size()) +
                           " tensor: tilec's Softmax is over the last "
                           "axis");
  }
  return EmitSoftmaxOf(node, t, node.input(0), id);
}

}  // namespace tilec::passes::onnx_import
