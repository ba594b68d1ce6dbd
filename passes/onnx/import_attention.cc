// The importer's self-attention pattern (importer.h): Reshape/Transpose/
// MatMul/Softmax over q, k and v projections of one tensor becomes a fused
// QKV MatMul and BiasAdd, AttentionScores, Softmax and AttentionContext.

#include "passes/onnx/importer.h"

namespace tilec::passes::onnx_import {

// If *t is x * c, c * x or x / c for a scalar constant c (through casts):
// *t becomes x and *factor is multiplied by c (or 1/c).
bool Importer::PeelScalarFactor(std::string* t, double* factor) const {
  const NodeProto* n = Node(PeelCasts(*t));
  if (n == nullptr || (n->op_type() != "Mul" && n->op_type() != "Div")) {
    return false;
  }
  const bool div = n->op_type() == "Div";
  for (int side = 0; side < (div ? 1 : 2); ++side) {
    double c = 0;
    if (Scalar(n->input(1 - side), &c) && c != 0) {
      *factor *= div ? 1.0 / c : c;
      *t = n->input(side);
      return true;
    }
  }
  return false;
}

// x @ W (+ b) with constant W [in, out] and b [out] (MatMul + Add, or a
// Gemm), through casts and scalar factors.
bool Importer::MatchLinear(std::string t, LinearMatch* m) const {
  m->factor = 1.0;
  while (PeelScalarFactor(&t, &m->factor)) {
  }
  const NodeProto* n = Node(PeelCasts(t));
  if (n == nullptr) return false;
  std::string matmul = t, bias;
  if (n->op_type() == "Add") {
    for (int side = 0; side < 2; ++side) {
      if (IsConstant(PeelCasts(n->input(side))) &&
          NodeIs(n->input(1 - side), "MatMul") != nullptr) {
        bias = PeelCasts(n->input(side));
        matmul = n->input(1 - side);
      }
    }
    if (bias.empty()) return false;
    n = NodeIs(matmul, "MatMul");
  }
  bool transpose = false;
  std::string gemm_bias;
  if (n->op_type() == "Gemm") {
    if (IntAttribute(*n, "transA", 0) != 0 ||
        FloatAttribute(*n, "alpha", 1.0f) != 1.0f ||
        FloatAttribute(*n, "beta", 1.0f) != 1.0f) {
      return false;
    }
    transpose = IntAttribute(*n, "transB", 0) != 0;
    if (n->input_size() > 2) gemm_bias = n->input(2);
    if (!bias.empty() || !gemm_bias.empty()) {
      if (!bias.empty() && !gemm_bias.empty()) return false;
      if (bias.empty()) bias = gemm_bias;
    }
  } else if (n->op_type() != "MatMul") {
    return false;
  }
  if (!IsConstant(n->input(1))) return false;
  const Shape* ws = ShapeOf(n->input(1));
  if (ws == nullptr || ws->size() != 2) return false;
  int64_t rows = 0, cols = 0;
  if (!Matrix(n->input(1), transpose, &m->weight, &rows, &cols).ok()) {
    return false;
  }
  m->in = rows;
  m->out = cols;
  m->bias.assign(cols, 0.0f);
  if (!bias.empty()) {
    ConstPtr b;
    if (!g_.Constant(bias, &b).ok() || b == nullptr ||
        StripOnes(b->shape) != Shape{cols}) {
      return false;
    }
    m->bias = ToFloats(*b);
  }
  m->x = n->input(0);
  m->node_name = NodeName(*n);
  return true;
}

// q, k or v: Transpose(Reshape(src, [B, T, H, D])) with the composed
// permutation `expected`, through casts and scalar factors.
bool Importer::MatchHeads(std::string t, const std::vector<int64_t>& expected,
                          HeadsMatch* h) const {
  std::vector<int64_t> perm = {0, 1, 2, 3};
  h->factor = 1.0;
  for (int guard = 0; guard < 16; ++guard) {
    const NodeProto* n = Node(PeelCasts(t));
    if (n == nullptr) return false;
    const std::string& op = n->op_type();
    if (PeelScalarFactor(&t, &h->factor)) continue;
    if (op == "Transpose") {
      std::vector<int64_t> p = IntsAttribute(*n, "perm");
      if (p.size() != 4) return false;
      for (int64_t& q : perm) q = p[q];
      t = n->input(0);
      continue;
    }
    if (op == "Reshape") {
      const Shape* out = ShapeOf(t);
      const Shape* in = ShapeOf(n->input(0));
      if (out == nullptr || in == nullptr || out->size() != 4 ||
          in->empty() || in->back() != (*out)[2] * (*out)[3] ||
          perm != expected) {
        return false;
      }
      h->source = n->input(0);
      h->batch = (*out)[0];
      h->tokens = (*out)[1];
      h->heads = (*out)[2];
      h->head_dim = (*out)[3];
      return true;
    }
    return false;
  }
  return false;
}

Status Importer::EmitTranspose(const NodeProto& node, const std::string& t,
                               uint32_t* id) {
  const std::vector<int64_t> perm = IntsAttribute(node, "perm");
  if (perm == std::vector<int64_t>{0, 2, 1, 3}) {
    if (const NodeProto* pv = NodeIs(node.input(0), "MatMul")) {
      return EmitAttention(node, *pv, t, id);
    }
  }
  if (perm == std::vector<int64_t>{0, 2, 1}) {
    const std::string flat = PeelCasts(node.input(0));
    const NodeProto* view = Node(flat);
    if (view != nullptr &&
        (view->op_type() == "Reshape" || view->op_type() == "Flatten")) {
      if (const NodeProto* conv = NodeIs(view->input(0), "Conv")) {
        return EmitPatchEmbedding(node, *conv, t, id);
      }
    }
  }
  return Unsupported(node,
                     "a Transpose outside the attention and patch "
                     "embedding patterns: tilec has no transpose "
                     "of a computed value");
}

// Transpose(MatMul(Softmax(scale * Q K^T), V), [0, 2, 1, 3]).
Status Importer::EmitAttention(const NodeProto& transpose, const NodeProto& pv,
                               const std::string& t, uint32_t* id) {
  auto fail = [&](const std::string& why) {
    return Unsupported(pv, "attention: " + why);
  };
  std::string probs_tensor = PeelCasts(pv.input(0));
  const NodeProto* softmax = Node(probs_tensor);
  std::string scores_tensor;
  if (softmax != nullptr && softmax->op_type() == "Softmax") {
    const Shape* s = ShapeOf(probs_tensor);
    int64_t axis = 0;
    if (s == nullptr ||
        !NormalizeAxis(IntAttribute(*softmax, "axis", -1),
                       static_cast<int64_t>(s->size()), &axis) ||
        axis != static_cast<int64_t>(s->size()) - 1) {
      return fail("the softmax is not over the last axis");
    }
    scores_tensor = softmax->input(0);
  } else if (softmax == nullptr || softmax->op_type() != "Div" ||
             !MatchSoftmaxExpanded(*softmax, &scores_tensor)) {
    return fail("the probabilities '" + probs_tensor +
                "' are not a softmax of the scores");
  }
  double scale = 1.0;
  std::string qk_tensor = scores_tensor;
  while (PeelScalarFactor(&qk_tensor, &scale)) {
  }
  const NodeProto* qk = NodeIs(qk_tensor, "MatMul");
  if (qk == nullptr) {
    return fail("the scores '" + scores_tensor +
                "' are not Q K^T (a mask "
                "or bias added to them is not supported)");
  }
  HeadsMatch q, k, v;
  if (!MatchHeads(qk->input(0), {0, 2, 1, 3}, &q) ||
      !MatchHeads(qk->input(1), {0, 2, 3, 1}, &k) ||
      !MatchHeads(pv.input(1), {0, 2, 1, 3}, &v)) {
    return fail(
        "q, k and v are not [B, T, H, D] views (Reshape then "
        "Transpose) of [B*T, H*D] tensors");
  }
  if (q.batch != k.batch || q.batch != v.batch || q.tokens != k.tokens ||
      q.tokens != v.tokens || q.heads != k.heads || q.heads != v.heads ||
      q.head_dim != k.head_dim || q.head_dim != v.head_dim) {
    return fail("q, k and v have different head shapes");
  }
  scale *= q.factor * k.factor;
  LinearMatch lq, lk, lv;
  const bool linear = MatchLinear(q.source, &lq) &&
                      MatchLinear(k.source, &lk) &&
                      MatchLinear(v.source, &lv);
  if (!linear || !Same(lq.x, lk.x) || !Same(lq.x, lv.x)) {
    return fail(
        "q, k and v are not projections (constant weights) of one "
        "tensor; tilec's attention reads one fused qkv value");
  }
  if (!options_.fuse_qkv) {
    return fail(
        "--no-fuse-qkv: keeping q, k and v apart needs "
        "AttentionScores(q, k) and AttentionContext(probs, v) "
        "forms that tilec's op set does not have (its attention "
        "ops read one fused [rows, 3*H*D] qkv value)");
  }
  scale *= lq.factor * lk.factor;
  const int64_t hd = q.heads * q.head_dim, rows = q.batch * q.tokens;
  if (lq.out != hd || lk.out != hd || lv.out != hd || lq.in != lk.in ||
      lq.in != lv.in) {
    return fail("the q, k and v projections have different sizes");
  }
  const int64_t in = lq.in;
  std::vector<float> w(static_cast<size_t>(in * 3 * hd)), b(3 * hd);
  const LinearMatch* parts[] = {&lq, &lk, &lv};
  for (int p = 0; p < 3; ++p) {
    const float f = p == 2 ? static_cast<float>(lv.factor) : 1.0f;
    for (int64_t r = 0; r < in; ++r) {
      for (int64_t c = 0; c < hd; ++c) {
        w[r * 3 * hd + p * hd + c] = parts[p]->weight[r * hd + c] * f;
      }
    }
    for (int64_t c = 0; c < hd; ++c) b[p * hd + c] = parts[p]->bias[c] * f;
  }
  fb::DType dtype;
  TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
  const std::string prefix =
      CommonPrefix({lq.node_name, lk.node_name, lv.node_name});
  uint32_t x;
  TILEC_RETURN_IF_ERROR(Value(lq.x, {rows, in}, &x));
  const uint32_t wv = NewWeight(prefix + "qkv.w", {in, 3 * hd}, w, dtype);
  const uint32_t bv = NewWeight(prefix + "qkv.b", {3 * hd}, b, dtype);
  const uint32_t qkv = NewOp(fb::OpKind::MatMul, prefix + "qkv", {x, wv},
                             prefix + "qkv.out", {rows, 3 * hd}, dtype);
  const uint32_t qkv_b =
      NewOp(fb::OpKind::BiasAdd, prefix + "qkv_bias", {qkv, bv},
            prefix + "qkv_bias.out", {rows, 3 * hd}, dtype);
  const Shape scores_shape = {q.batch, q.heads, q.tokens, q.tokens};
  fb::OperationT* op = nullptr;
  const uint32_t scores =
      NewOp(fb::OpKind::AttentionScores, NodeName(*qk), {qkv_b},
            scores_tensor, scores_shape, dtype, &op);
  op->heads = static_cast<int32_t>(q.heads);
  op->head_dim = static_cast<int32_t>(q.head_dim);
  op->scale = static_cast<float>(scale);
  const uint32_t probs = NewOp(fb::OpKind::Softmax, NodeName(*softmax),
                               {scores}, probs_tensor, scores_shape, dtype);
  *id = NewOp(fb::OpKind::AttentionContext, NodeName(pv), {probs, qkv_b}, t,
              {rows, hd}, dtype, &op);
  op->heads = static_cast<int32_t>(q.heads);
  op->head_dim = static_cast<int32_t>(q.head_dim);
  ++attention_layers_;
  batch_ = q.batch;
  tokens_ = q.tokens;
  width_ = hd;
  heads_ = q.heads;
  (void)transpose;
  return Status::Ok();
}

std::string Importer::CommonPrefix(const std::vector<std::string>& names) {
  std::string p = names[0];
  for (const std::string& n : names) {
    size_t i = 0;
    while (i < p.size() && i < n.size() && p[i] == n[i]) ++i;
    p.resize(i);
  }
  // Cut back to a separator so the prefix is a scope ("/l0/attn/").
  const size_t cut = p.find_last_of("/.");
  return cut == std::string::npos ? "" : p.substr(0, cut + 1);
}

}  // namespace tilec::passes::onnx_import
