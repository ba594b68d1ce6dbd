// The importer's pooling heads (importer.h): attention pooling over a
// learned probe (SigLIP's MAP head) and a mean over the tokens.
//
// nn.MultiheadAttention(batch_first=True) over one learned probe per
// image (SigLIP's MAP head) as torch.onnx.export writes it: the tokens
// transposed to sequence-first [T, B, w], q from the probe and k, v from
// the tokens by MatMul with slices of in_proj_weight (k and v by one
// MatMul, then Slice, when key is value), each reshaped to [T, B*H, D],
// q divided by sqrt(D), bmm, Softmax, bmm with v; with one query the
// transposes around q and the context move no data (KeepsRowOrder).
// It becomes import-model's head: the probe's q projection, copied per
// image, a kv projection [w, 2w] of the tokens, the cross form of
// AttentionScores, Softmax, AttentionContext.

#include "passes/onnx/importer.h"

#include <algorithm>

namespace tilec::passes::onnx_import {

// The batched probs @ v of attention with one query: a softmax's
// [B*H, 1, T] times [B*H, T, D].
bool Importer::IsPoolingAttention(const NodeProto& pv) const {
  const Shape* ps = ShapeOf(pv.input(0));
  const Shape* vs = ShapeOf(pv.input(1));
  return ps != nullptr && vs != nullptr && ps->size() == 3 &&
         vs->size() == 3 && (*ps)[1] == 1 &&
         NodeIs(pv.input(0), "Softmax") != nullptr;
}

bool Importer::MatchKeyValuePart(const std::string& t,
                                 const std::vector<int64_t>& perm,
                                 KeyValuePart* part) const {
  const NodeProto* transpose = NodeIs(t, "Transpose");
  if (transpose == nullptr || IntsAttribute(*transpose, "perm") != perm) {
    return false;
  }
  const NodeProto* reshape = NodeIs(transpose->input(0), "Reshape");
  if (reshape == nullptr) return false;
  std::string projected = reshape->input(0);
  const Shape* ps = ShapeOf(projected);
  if (ps == nullptr || ps->size() != 3) return false;
  part->first = 0;
  part->count = ps->back();
  if (const NodeProto* slice = NodeIs(projected, "Slice")) {
    const Shape* whole = ShapeOf(slice->input(0));
    std::vector<int64_t> begin, step;
    Shape out;
    ConstPtr bounds[5];
    for (int i = 1; i < std::min(slice->input_size(), 5); ++i) {
      if (!slice->input(i).empty() &&
          (!g_.Constant(slice->input(i), &bounds[i]).ok() ||
           bounds[i] == nullptr)) {
        return false;
      }
    }
    if (whole == nullptr || bounds[1] == nullptr || bounds[2] == nullptr ||
        !SliceWindow(*whole, *bounds[1], *bounds[2], bounds[3].get(),
                     bounds[4].get(), &begin, &step, &out) ||
        step.back() != 1 || Shape(out.begin(), out.end() - 1) !=
                                Shape(whole->begin(), whole->end() - 1)) {
      return false;
    }
    part->first = begin.back();
    projected = slice->input(0);
  }
  return MatchLinear(projected, &part->linear);
}

// Transpose(x, [1, 0, 2]) of the [B, T, w] tokens: batch_first's
// sequence-first view; the tokens themselves.
bool Importer::SequenceFirstSource(const std::string& t,
                                   std::string* tokens) const {
  const NodeProto* n = NodeIs(t, "Transpose");
  if (n == nullptr || IntsAttribute(*n, "perm") != Shape{1, 0, 2}) {
    return false;
  }
  *tokens = n->input(0);
  return true;
}

// Through views, Expand and Tile: the constant [.., 1, w] probe a query
// repeats for every image.
bool Importer::ProbeSource(std::string t, int64_t width,
                           std::string* probe) const {
  for (int guard = 0; guard < 16; ++guard) {
    t = PeelViews(t);
    const NodeProto* n = Node(t);
    if (n != nullptr &&
        (n->op_type() == "Expand" || n->op_type() == "Tile") &&
        IsConstant(n->input(1))) {
      t = n->input(0);
      continue;
    }
    const Shape* s = ShapeOf(t);
    if (n != nullptr || !IsConstant(t) || s == nullptr ||
        Elements(*s) != width) {
      return false;
    }
    *probe = t;
    return true;
  }
  return false;
}

// The pattern above from the context MatMul `pv` up; an Infeasible status
// naming `pv` and what it expected where the graph differs.
Status Importer::MatchPoolingAttention(const NodeProto& pv,
                                       PoolingMatch* m) const {
  auto fail = [&](const std::string& why) {
    return Unsupported(pv, "attention pooling (one query): " + why);
  };
  const std::string probs = PeelCasts(pv.input(0));
  m->softmax = NodeIs(probs, "Softmax");
  const int64_t axis =
      m->softmax == nullptr ? 0 : IntAttribute(*m->softmax, "axis", -1);
  if (m->softmax == nullptr || (axis != -1 && axis != 2)) {
    return fail("expected a Softmax over the keys as the probabilities '" +
                probs + "'");
  }
  std::string qk = m->softmax->input(0);
  while (PeelScalarFactor(&qk, &m->scale)) {
  }
  m->qk = NodeIs(qk, "MatMul");
  if (m->qk == nullptr) {
    return fail("expected the scores '" + m->softmax->input(0) +
                "' to be q k^T scaled by constants (a mask or a bias added "
                "to them is not supported)");
  }
  std::string q = m->qk->input(0);
  while (PeelScalarFactor(&q, &m->scale)) {
  }
  m->q_node = Node(PeelViews(q));
  if (!MatchLinear(PeelViews(q), &m->q) ||
      !ProbeSource(m->q.x, m->q.in, &m->probe)) {
    return fail("expected q to be a projection (constant weights) of a "
                "constant probe repeated for each image");
  }
  std::string v_tokens;
  if (!MatchKeyValuePart(m->qk->input(1), {1, 2, 0}, &m->k) ||
      !MatchKeyValuePart(pv.input(1), {1, 0, 2}, &m->v) ||
      !SequenceFirstSource(m->k.linear.x, &m->tokens) ||
      !SequenceFirstSource(m->v.linear.x, &v_tokens) ||
      !Same(m->tokens, v_tokens)) {
    return fail("expected k and v to be projections (constant weights) of "
                "one [B, T, w] tensor transposed to [T, B, w] "
                "(batch_first=True), viewed [T, B*H, D] and transposed");
  }
  const Shape* ts = ShapeOf(m->tokens);
  const Shape* ks = ShapeOf(m->qk->input(1));  // [B*H, D, T]
  if (ts == nullptr || ts->size() != 3 || ks == nullptr || ks->size() != 3) {
    return fail("expected [B, T, w] tokens");
  }
  m->batch = (*ts)[0];
  m->keys = (*ts)[1];
  m->width = (*ts)[2];
  m->head_dim = (*ks)[1];
  m->heads = (*ks)[0] / m->batch;
  const int64_t w = m->q.out;
  if (m->heads * m->batch != (*ks)[0] || m->heads * m->head_dim != w ||
      m->k.count != w || m->v.count != w || (*ks)[2] != m->keys ||
      m->k.linear.in != m->width) {
    return fail("q, k and v do not split into the same heads");
  }
  return Status::Ok();
}

Status Importer::EmitPoolingAttention(const NodeProto& pv, const std::string& t,
                                      uint32_t* id) {
  PoolingMatch m;
  TILEC_RETURN_IF_ERROR(MatchPoolingAttention(pv, &m));
  fb::DType dtype;
  TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
  uint32_t x;
  TILEC_RETURN_IF_ERROR(Value(m.tokens, {m.batch * m.keys, m.width}, &x));
  uint32_t q;
  TILEC_RETURN_IF_ERROR(EmitProbeQuery(m, dtype, &q));
  const uint32_t kv = EmitKeyValue(m.k, m.v, m.batch * m.keys, dtype, x);
  const Shape scores_shape = {m.batch, m.heads, 1, m.keys};
  fb::OperationT* op = nullptr;
  const uint32_t scores =
      NewOp(fb::OpKind::AttentionScores, NodeName(*m.qk), {q, kv},
            m.softmax->input(0), scores_shape, dtype, &op);
  op->heads = static_cast<int32_t>(m.heads);
  op->head_dim = static_cast<int32_t>(m.head_dim);
  op->scale = static_cast<float>(m.scale);
  const uint32_t probs =
      NewOp(fb::OpKind::Softmax, NodeName(*m.softmax), {scores},
            m.softmax->output(0), scores_shape, dtype);
  *id = NewOp(fb::OpKind::AttentionContext, NodeName(pv), {probs, kv}, t,
              {m.batch, m.q.out}, dtype, &op);
  op->heads = static_cast<int32_t>(m.heads);
  op->head_dim = static_cast<int32_t>(m.head_dim);
  return Status::Ok();
}

// The probe row's query (a one-row GEMM and its bias, as import-model
// builds it), copied for each image.
Status Importer::EmitProbeQuery(const PoolingMatch& m, fb::DType dtype,
                                uint32_t* q) {
  const LinearMatch& lq = m.q;
  *q = NewOp(fb::OpKind::MatMul, lq.node_name,
             {ProbeRow(m.probe, lq.in, dtype),
              ScaledWeight(lq, 0, lq.out, dtype)},
             lq.node_name + ".out", {1, lq.out}, dtype);
  *q = NewOp(fb::OpKind::BiasAdd, lq.node_name + ".bias",
             {*q, NewWeight(lq.node_name + ".b", {lq.out},
                            ScaledBias(lq, 0, lq.out), dtype)},
             lq.node_name + ".bias.out", {1, lq.out}, dtype);
  if (m.batch == 1) return Status::Ok();
  return EmitPerImage(*m.q_node, *q, m.batch, lq.node_name + ".rows.out", q);
}

// The probe as one [1, w] row.
uint32_t Importer::ProbeRow(const std::string& probe, int64_t width,
                            fb::DType dtype) {
  ConstPtr c;
  (void)g_.Constant(probe, &c);  // ProbeSource saw it constant
  return NewWeight(probe, {1, width}, ToFloats(*c), dtype);
}

// Columns [first, first + count) of a projection's weight [in, out] (its
// scalar factor folded in).
uint32_t Importer::ScaledWeight(const LinearMatch& m, int64_t first,
                                int64_t count, fb::DType dtype) {
  return NewWeight(m.node_name + ".w", {m.in, count},
                   WeightColumns(m, first, count), dtype);
}

std::vector<float> Importer::WeightColumns(const LinearMatch& m, int64_t first,
                                           int64_t count) {
  std::vector<float> w;
  for (int64_t r = 0; r < m.in; ++r) {
    for (int64_t c = first; c < first + count; ++c) {
      w.push_back(static_cast<float>(m.weight[r * m.out + c] * m.factor));
    }
  }
  return w;
}

std::vector<float> Importer::ScaledBias(const LinearMatch& m, int64_t first,
                                        int64_t count) {
  std::vector<float> b;
  for (int64_t c = first; c < first + count; ++c) {
    b.push_back(static_cast<float>(m.bias[c] * m.factor));
  }
  return b;
}

// The tokens' [rows, 2w] keys and values, columns [k heads | v heads]:
// one MatMul over [Wk | Wv] and its bias, as import-model's head.
uint32_t Importer::EmitKeyValue(const KeyValuePart& k, const KeyValuePart& v,
                                int64_t rows, fb::DType dtype, uint32_t x) {
  const int64_t in = k.linear.in, n = k.count + v.count;
  const std::vector<float> wk = WeightColumns(k.linear, k.first, k.count);
  const std::vector<float> wv = WeightColumns(v.linear, v.first, v.count);
  std::vector<float> w;
  for (int64_t r = 0; r < in; ++r) {
    w.insert(w.end(), wk.begin() + r * k.count, wk.begin() + (r + 1) * k.count);
    w.insert(w.end(), wv.begin() + r * v.count, wv.begin() + (r + 1) * v.count);
  }
  std::vector<float> b = ScaledBias(k.linear, k.first, k.count);
  const std::vector<float> bv = ScaledBias(v.linear, v.first, v.count);
  b.insert(b.end(), bv.begin(), bv.end());
  const std::string name =
      CommonPrefix({k.linear.node_name, v.linear.node_name}) + "kv";
  const uint32_t product =
      NewOp(fb::OpKind::MatMul, name, {x, NewWeight(name + ".w", {in, n}, w, dtype)},
            name + ".out", {rows, n}, dtype);
  return NewOp(fb::OpKind::BiasAdd, name + "_bias",
               {product, NewWeight(name + ".b", {n}, b, dtype)},
               name + "_bias.out", {rows, n}, dtype);
}

// ReduceMean over the tokens (the axis before the last) of [B, T, w]:
// the mean of each image's rows is a product with a constant [B, B*T]
// averaging matrix (1/T on image b's T columns of row b), one MatMul
// that the planner prices like any other (docs/import-onnx.md).
Status Importer::EmitTokenMean(const NodeProto& node, const std::string& t,
                               uint32_t* id) {
  const Shape* xs = ShapeOf(node.input(0));
  const std::vector<int64_t> axes = AxesOf(node);
  if (xs == nullptr || xs->size() < 2 ||
      axes != std::vector<int64_t>{static_cast<int64_t>(xs->size()) - 2}) {
    return Unsupported(node,
                       "a ReduceMean over axes other than the tokens (the "
                       "axis before the last, e.g. x.mean(dim=1) of [B, T, "
                       "w]): tilec averages whole rows only");
  }
  const int64_t tokens = (*xs)[xs->size() - 2], width = xs->back();
  const int64_t images = Elements(*xs) / (tokens * width);
  uint32_t x;
  TILEC_RETURN_IF_ERROR(Value(node.input(0), {images * tokens, width}, &x));
  std::vector<float> average(static_cast<size_t>(images * images * tokens));
  for (int64_t b = 0; b < images; ++b) {
    std::fill_n(average.begin() + b * images * tokens + b * tokens, tokens,
                static_cast<float>(1.0 / static_cast<double>(tokens)));
  }
  fb::DType dtype;
  TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
  const std::string name = NodeName(node);
  const uint32_t a =
      NewWeight(name + ".average", {images, images * tokens}, average, dtype);
  *id = NewOp(fb::OpKind::MatMul, name, {a, x}, t, {images, width}, dtype);
  return Status::Ok();
}

}  // namespace tilec::passes::onnx_import
