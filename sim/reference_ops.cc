// The reference executor's ops, one Run function per op kind, in F32 with
// each result rounded to its stored dtype (sim/reference.h).

#include <algorithm>
#include <functional>

#include "formats/op_shapes.h"
#include "kernels/blas.h"
#include "sim/patchify.h"
#include "sim/reference_executor.h"
#include "sim/tensor_data.h"

namespace tilec::kernels::executor {

Status Executor::RunOp(const fb::OperationT& op) {
  switch (op.kind) {
    case fb::OpKind::LayerNorm:
    case fb::OpKind::MatMul:
    case fb::OpKind::BiasAdd:
    case fb::OpKind::Gelu:
    case fb::OpKind::Add:
    case fb::OpKind::Cast:
    case fb::OpKind::Softmax:
    case fb::OpKind::AttentionScores:
    case fb::OpKind::AttentionContext:
    case fb::OpKind::Redistribute:
    case fb::OpKind::Patchify:
    case fb::OpKind::CopyRows: {
      // The kinds with a shape rule: the verifier's checks, run again so
      // the reference never trusts its caller.
      TILEC_RETURN_IF_ERROR(ir::CheckOpShapes(op, module_));
      break;
    }
    case fb::OpKind::Fused:
    case fb::OpKind::Moments:
    case fb::OpKind::Normalize:
      break;  // checked by their own functions
    default:
      return Bad(
          op, "unknown op kind " + std::to_string(static_cast<int>(op.kind)));
  }
  switch (op.kind) {
    case fb::OpKind::LayerNorm:
      return RunLayerNorm(op);
    case fb::OpKind::MatMul:
      return RunMatMul(op);
    case fb::OpKind::BiasAdd:
    case fb::OpKind::Add:
      return RunAdd(op);
    case fb::OpKind::Gelu:
      return RunGelu(op);
    case fb::OpKind::Cast:
    case fb::OpKind::Redistribute:
      return RunCast(op);
    case fb::OpKind::Softmax:
      return RunSoftmax(op);
    case fb::OpKind::AttentionScores:
      return RunAttentionScores(op);
    case fb::OpKind::AttentionContext:
      return RunAttentionContext(op);
    case fb::OpKind::Fused:
      return RunFused(op);
    case fb::OpKind::Moments:
      return RunMoments(op);
    case fb::OpKind::Normalize:
      return RunNormalize(op);
    case fb::OpKind::Patchify:
      return RunPatchify(op);
    case fb::OpKind::CopyRows:
      return RunCopyRows(op);
  }
  return Bad(op, "unknown op kind");  // unreachable: checked above
}

Status Executor::ByRows(
    const fb::OperationT& op, int64_t rows, int64_t w,
    std::initializer_list<const std::vector<float>*> split,
    const std::function<Status(int64_t, int64_t)>& body) const {
  for (const std::vector<float>* data : split) {
    if (static_cast<int64_t>(data->size()) != rows * w) {
      return Check(op, Status::BadInput(
                           "an operand holds " + std::to_string(data->size()) +
                           " elements, not " + std::to_string(rows) + " x " +
                           std::to_string(w)));
    }
  }
  const int threads = rows * w >= kMinParallelElements ? options_.threads : 1;
  // Each thread's rows go to the body in blocks: a kernel copies its
  // operands, and a copy of a whole thread's share of a batch 8 softmax
  // (hundreds of MB) is fresh pages to fault in every time, where a block
  // stays in cache and in the heap. Rows are independent, so the blocks
  // change no result (as the thread split does not).
  const int64_t block =
      std::max<int64_t>(1, kRowBlockElements / std::max<int64_t>(w, 1));
  return Check(op, ParallelFor(rows, threads, [&](int64_t begin, int64_t end) {
                 for (int64_t r = begin; r < end; r += block) {
                   TILEC_RETURN_IF_ERROR(body(r, std::min(block, end - r)));
                 }
                 return Status::Ok();
               }));
}

Status Executor::ByRowsStored(
    const fb::OperationT& op, int64_t rows, int64_t w,
    std::initializer_list<const std::vector<float>*> split,
    std::vector<float>* out, ReferenceTensor* y,
    const std::function<Status(int64_t, int64_t)>& body) {
  TILEC_RETURN_IF_ERROR(ByRows(op, rows, w, split, [&](int64_t r0, int64_t n) {
    TILEC_RETURN_IF_ERROR(body(r0, n));
    RoundToStored(
        y->dtype, y->fp8_scale_exp,
        std::span<float>(out->data() + r0 * w, static_cast<size_t>(n * w)));
    return Status::Ok();
  }));
  Keep(y, std::move(*out));
  return Status::Ok();
}

Status Executor::RunLayerNorm(const fb::OperationT& op) {
  const ReferenceTensor *x, *gamma, *beta;
  ReferenceTensor* y;
  TILEC_RETURN_IF_ERROR(Input(op, 0, &x));
  TILEC_RETURN_IF_ERROR(Input(op, 1, &gamma));
  TILEC_RETURN_IF_ERROR(Input(op, 2, &beta));
  TILEC_RETURN_IF_ERROR(Output(op, 0, &y));
  int64_t rows, w;
  RowsAndWidth(x->shape, &rows, &w);
  std::vector<float> out = NewBuffer(x->data.size());
  return ByRowsStored(
      op, rows, w, {&x->data, &out}, &out, y, [&](int64_t r0, int64_t n) {
        return LayerNorm(In(x->data.data() + r0 * w, n * w), In(gamma->data),
                         In(beta->data), Out(out.data() + r0 * w, n * w), n, w,
                         op.eps);
      });
}

Status Executor::RunMatMul(const fb::OperationT& op) {
  const ReferenceTensor *a, *b;
  ReferenceTensor* c;
  TILEC_RETURN_IF_ERROR(Input(op, 0, &a));
  TILEC_RETURN_IF_ERROR(Input(op, 1, &b));
  TILEC_RETURN_IF_ERROR(Output(op, 0, &c));
  const int64_t m = a->shape[0], k = a->shape[1], n = b->shape[1];
  std::vector<float> out = NewBuffer(static_cast<size_t>(m * n));
  const int threads = m * k * n >= kMinParallelMacs ? options_.threads : 1;
  if (!KOrder(a->dtype, b->dtype)) {
    BlasProduct p;
    p.m = m, p.k = k, p.n = n;
    p.a = a->data.data(), p.lda = k;
    p.b = b->data.data(), p.ldb = n;
    p.c = out.data(), p.ldc = n;
    TILEC_RETURN_IF_ERROR(Check(op, BlasMultiplyParallel(p, threads)));
    Store(c, std::move(out));
    return Status::Ok();
  }
  // Column blocks of B and C, so that each thread packs only its part of
  // B (in row blocks, each packed all of it): every C element is still the
  // same k-ordered sum, so the split changes nothing but the time.
  const bool exact_products =
      ProductsExactInF32(KernelDType(a->dtype), KernelDType(b->dtype));
  TILEC_RETURN_IF_ERROR(
      Check(op, ParallelFor(n, threads, [&](int64_t begin, int64_t end) {
              MultiplyF32Columns(a->data.data(), b->data.data(), out.data(), m,
                                 k, n, begin, end, exact_products);
              return Status::Ok();
            })));
  Store(c, std::move(out));
  return Status::Ok();
}

Status Executor::RunAdd(const fb::OperationT& op) {
  const ReferenceTensor *x, *y;
  ReferenceTensor* z;
  TILEC_RETURN_IF_ERROR(Input(op, 0, &x));
  TILEC_RETURN_IF_ERROR(Input(op, 1, &y));
  TILEC_RETURN_IF_ERROR(Output(op, 0, &z));
  int64_t rows, w;
  RowsAndWidth(x->shape, &rows, &w);
  std::vector<float> out = NewBuffer(x->data.size());
  const bool bias = op.kind == fb::OpKind::BiasAdd;
  // A bias is one row for every row, not split.
  return ByRowsStored(
      op, rows, w, {&x->data, bias ? &x->data : &y->data, &out}, &out, z,
      [&](int64_t r0, int64_t n) {
        const Operand xs = In(x->data.data() + r0 * w, n * w);
        const Operand outs = Out(out.data() + r0 * w, n * w);
        return bias ? BiasAdd(xs, In(y->data), outs, n, w)
                    : Add(xs, In(y->data.data() + r0 * w, n * w), outs, n, w);
      });
}

Status Executor::GeluFormOf(const fb::OperationT& op, fb::GeluForm form,
                            GeluForm* out) const {
  StatusOr<GeluForm> parsed = GeluFormFromInt(static_cast<int>(form));
  if (!parsed.ok()) return Bad(op, parsed.status().message());
  *out = *parsed;
  return Status::Ok();
}

Status Executor::RunGelu(const fb::OperationT& op) {
  const ReferenceTensor* x;
  ReferenceTensor* y;
  TILEC_RETURN_IF_ERROR(Input(op, 0, &x));
  TILEC_RETURN_IF_ERROR(Output(op, 0, &y));
  GeluForm form = GeluForm::kTanh;
  TILEC_RETURN_IF_ERROR(GeluFormOf(op, op.gelu, &form));
  int64_t rows, w;
  RowsAndWidth(x->shape, &rows, &w);
  std::vector<float> out = NewBuffer(x->data.size());
  return ByRowsStored(
      op, rows, w, {&x->data, &out}, &out, y, [&](int64_t r0, int64_t n) {
        return GeluKernel(In(x->data.data() + r0 * w, n * w),
                          Out(out.data() + r0 * w, n * w), n, w, form);
      });
}

Status Executor::RunCast(const fb::OperationT& op) {
  const ReferenceTensor* x;
  ReferenceTensor* y;
  TILEC_RETURN_IF_ERROR(Input(op, 0, &x));
  TILEC_RETURN_IF_ERROR(Output(op, 0, &y));
  std::vector<float> out = x->data;
  TILEC_RETURN_IF_ERROR(CastInPlace(op, y->dtype, y->fp8_scale_exp, &out));
  Store(y, std::move(out));
  return Status::Ok();
}

Status Executor::RunCopyRows(const fb::OperationT& op) {
  std::vector<const ReferenceTensor*> xs(op.operands.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    TILEC_RETURN_IF_ERROR(Input(op, i, &xs[i]));
  }
  ReferenceTensor* y;
  TILEC_RETURN_IF_ERROR(Output(op, 0, &y));
  const int64_t w = y->shape[1];
  std::vector<float> out = NewBuffer(static_cast<size_t>(y->shape[0] * w));
  for (const auto& r : op.rows) {
    const std::vector<float>& src = xs[r->operand]->data;
    if (static_cast<int64_t>(src.size()) < (r->first + r->count) * w) {
      return Bad(op, "operand " + std::to_string(r->operand) + " holds " +
                         std::to_string(src.size()) + " elements");
    }
    std::copy(src.begin() + r->first * w,
              src.begin() + (r->first + r->count) * w,
              out.begin() + r->at * w);
  }
  Store(y, std::move(out));
  return Status::Ok();
}

Status Executor::RunSoftmax(const fb::OperationT& op) {
  const ReferenceTensor* x;
  ReferenceTensor* y;
  TILEC_RETURN_IF_ERROR(Input(op, 0, &x));
  TILEC_RETURN_IF_ERROR(Output(op, 0, &y));
  int64_t rows, w;
  RowsAndWidth(x->shape, &rows, &w);
  std::vector<float> out = NewBuffer(x->data.size());
  return ByRowsStored(
      op, rows, w, {&x->data, &out}, &out, y, [&](int64_t r0, int64_t n) {
        return Softmax(In(x->data.data() + r0 * w, n * w),
                       Out(out.data() + r0 * w, n * w), n, w, op.scale);
      });
}

void Executor::Gather(const float* src, int64_t stride, int64_t row,
                      int64_t column, int64_t t, int64_t d, bool transpose,
                      float* dst) {
  for (int64_t i = 0; i < t; ++i) {
    const float* s = src + (row + i) * stride + column;
    for (int64_t j = 0; j < d; ++j) {
      if (transpose) {
        dst[j * t + i] = s[j];
      } else {
        dst[i * d + j] = s[j];
      }
    }
  }
}

Executor::HeadColumns Executor::ColumnsOf(const ReferenceTensor* q,
                                          const ReferenceTensor* kv,
                                          int64_t hd) {
  HeadColumns c;
  c.q = q;
  c.kv = kv;
  const bool cross = kv->shape[1] == 2 * hd;
  c.kv_stride = kv->shape[1];
  c.q_stride = q == nullptr ? 0 : q->shape[1];
  c.k_column = cross ? 0 : hd;
  c.v_column = cross ? hd : 2 * hd;
  return c;
}

Status Executor::RunAttentionScores(const fb::OperationT& op) {
  const ReferenceTensor *q, *kv;
  ReferenceTensor* scores;
  TILEC_RETURN_IF_ERROR(Input(op, 0, &q));
  kv = q;
  if (op.operands.size() == 2) TILEC_RETURN_IF_ERROR(Input(op, 1, &kv));
  TILEC_RETURN_IF_ERROR(Output(op, 0, &scores));
  const int64_t batch = scores->shape[0], heads = op.heads,
                tq = scores->shape[2], tk = scores->shape[3],
                d = op.head_dim;
  const HeadColumns cols = ColumnsOf(q, kv, heads * d);
  std::vector<float> out =
      NewBuffer(static_cast<size_t>(batch * heads * tq * tk));
  // One GEMM per (batch, head); pairs are independent, so they are spread
  // over the threads.
  const int threads =
      batch * heads * tq * tk * d >= kMinParallelMacs ? options_.threads : 1;
  const bool exact = KOrder(q->dtype, kv->dtype);
  auto body = [&](int64_t begin, int64_t end) -> Status {
    std::vector<float> qh, k_t;
    if (exact) {
      qh.resize(static_cast<size_t>(tq * d));
      k_t.resize(static_cast<size_t>(d * tk));
    }
    for (int64_t pair = begin; pair < end; ++pair) {
      // Image b of the result is image first_image + b of the operands.
      const int64_t b = pair / heads, h = pair % heads,
                    image = std::max(op.first_image, 0) + b;
      float* s = out.data() + pair * tq * tk;
      if (!exact) {
        // q [tq, d] times k [tk, d] transposed, read in place in the
        // fused operands.
        BlasProduct p;
        p.m = tq, p.k = d, p.n = tk;
        p.a = q->data.data() + image * tq * cols.q_stride + h * d;
        p.lda = cols.q_stride;
        p.b = kv->data.data() + image * tk * cols.kv_stride + cols.k_column +
              h * d;
        p.ldb = cols.kv_stride;
        p.transpose_b = true;
        p.c = s, p.ldc = tk;
        TILEC_RETURN_IF_ERROR(BlasMultiply(p));
      } else {
        Gather(q->data.data(), cols.q_stride, image * tq, h * d, tq, d,
               false, qh.data());
        Gather(kv->data.data(), cols.kv_stride, image * tk,
               cols.k_column + h * d, tk, d, true, k_t.data());
        TILEC_RETURN_IF_ERROR(
            Gemm(In(qh), In(k_t), Out(s, tq * tk), tq, d, tk, false));
      }
      // The scale multiplies the F32 sums; the result rounds once, here
      // while the pair's scores are in cache (Store's rounding, a pair at a
      // time).
      for (int64_t i = 0; i < tq * tk; ++i) s[i] *= op.scale;
      RoundToStored(scores->dtype, scores->fp8_scale_exp,
                    std::span<float>(s, static_cast<size_t>(tq * tk)));
    }
    return Status::Ok();
  };
  TILEC_RETURN_IF_ERROR(Check(op, ParallelFor(batch * heads, threads, body)));
  Keep(scores, std::move(out));
  return Status::Ok();
}

Status Executor::RunAttentionContext(const fb::OperationT& op) {
  const ReferenceTensor *probs, *kv;
  ReferenceTensor* ctx;
  TILEC_RETURN_IF_ERROR(Input(op, 0, &probs));
  TILEC_RETURN_IF_ERROR(Input(op, 1, &kv));
  TILEC_RETURN_IF_ERROR(Output(op, 0, &ctx));
  const int64_t batch = probs->shape[0], heads = op.heads,
                tq = probs->shape[2], tk = probs->shape[3],
                d = op.head_dim;
  const HeadColumns cols = ColumnsOf(nullptr, kv, heads * d);
  std::vector<float> out =
      NewBuffer(static_cast<size_t>(batch * tq * heads * d));
  const int threads =
      batch * heads * tq * tk * d >= kMinParallelMacs ? options_.threads : 1;
  const bool exact = KOrder(probs->dtype, kv->dtype);
  auto body = [&](int64_t begin, int64_t end) -> Status {
    std::vector<float> v, c;
    if (exact) {
      v.resize(static_cast<size_t>(tk * d));
      c.resize(static_cast<size_t>(tq * d));
    }
    for (int64_t pair = begin; pair < end; ++pair) {
      const int64_t b = pair / heads, h = pair % heads,
                    image = std::max(op.first_image, 0) + b;
      const float* p = probs->data.data() + pair * tq * tk;
      if (!exact) {
        // probs [tq, tk] times the v slice [tk, d] of kv, into columns
        // h*D.. of rows b*Tq.. of the result, in place.
        BlasProduct product;
        product.m = tq, product.k = tk, product.n = d;
        product.a = p, product.lda = tk;
        product.b = kv->data.data() + image * tk * cols.kv_stride +
                    cols.v_column + h * d;
        product.ldb = cols.kv_stride;
        product.c = out.data() + b * tq * heads * d + h * d;
        product.ldc = heads * d;
        TILEC_RETURN_IF_ERROR(BlasMultiply(product));
        continue;
      }
      Gather(kv->data.data(), cols.kv_stride, image * tk,
             cols.v_column + h * d, tk, d, false, v.data());
      if (Status st =
              Gemm(In(p, tq * tk), In(v), Out(c), tq, tk, d, false);
          !st.ok()) {
        return st;
      }
      // Head h fills columns h*D .. h*D+D-1 of rows b*Tq .. b*Tq+Tq-1.
      for (int64_t i = 0; i < tq; ++i) {
        std::copy_n(c.data() + i * d, d,
                    out.data() + (b * tq + i) * heads * d + h * d);
      }
    }
    return Status::Ok();
  };
  TILEC_RETURN_IF_ERROR(Check(op, ParallelFor(batch * heads, threads, body)));
  Store(ctx, std::move(out));
  return Status::Ok();
}

Status Executor::RunPatchify(const fb::OperationT& op) {
  const ReferenceTensor* image;
  ReferenceTensor* patches;
  TILEC_RETURN_IF_ERROR(Input(op, 0, &image));
  TILEC_RETURN_IF_ERROR(Output(op, 0, &patches));
  Store(patches, Patchify(image->data, image->shape, op.patch));
  return Status::Ok();
}

Status Executor::CheckMomentsValue(const fb::OperationT& op,
                                   const ReferenceTensor& m, int64_t rows,
                                   const char* role) const {
  const std::vector<int64_t> expected = {rows, kMomentFloats};
  if (m.shape != expected) {
    return Bad(op, std::string(role) + " (value " + std::to_string(m.id) +
                       " " + m.name + ") has shape " + ShapeText(m.shape) +
                       ", expected " + ShapeText(expected) +
                       " ({count, mean, M2} per row)");
  }
  if (m.dtype != fb::DType::F32) {
    return Bad(op, std::string(role) + " (value " + std::to_string(m.id) +
                       " " + m.name + ") is " +
                       std::string(DTypeName(KernelDType(m.dtype))) +
                       ", moments are F32");
  }
  return Status::Ok();
}

Status Executor::RunMoments(const fb::OperationT& op) {
  TILEC_RETURN_IF_ERROR(Arity(op, 1, 1));
  const ReferenceTensor* x;
  ReferenceTensor* m;
  TILEC_RETURN_IF_ERROR(Input(op, 0, &x));
  TILEC_RETURN_IF_ERROR(Output(op, 0, &m));
  int64_t rows, w;
  RowsAndWidth(x->shape, &rows, &w);
  TILEC_RETURN_IF_ERROR(CheckMomentsValue(op, *m, rows, "result 0"));
  std::vector<float> out = NewBuffer(static_cast<size_t>(rows) * kMomentFloats);
  TILEC_RETURN_IF_ERROR(Check(op, LnMoments(In(x->data), Out(out), rows, w)));
  Store(m, std::move(out));
  return Status::Ok();
}

Status Executor::RunNormalize(const fb::OperationT& op) {
  TILEC_RETURN_IF_ERROR(Arity(op, 4, 1));
  const ReferenceTensor *x, *m, *gamma, *beta;
  ReferenceTensor* y;
  TILEC_RETURN_IF_ERROR(Input(op, 0, &x));
  TILEC_RETURN_IF_ERROR(Input(op, 1, &m));
  TILEC_RETURN_IF_ERROR(Input(op, 2, &gamma));
  TILEC_RETURN_IF_ERROR(Input(op, 3, &beta));
  TILEC_RETURN_IF_ERROR(Output(op, 0, &y));
  int64_t rows, w;
  RowsAndWidth(x->shape, &rows, &w);
  TILEC_RETURN_IF_ERROR(CheckMomentsValue(op, *m, rows, "operand 1"));
  const std::vector<int64_t> row = {w};
  if (gamma->shape != row || beta->shape != row) {
    return Bad(op, "gamma " + ShapeText(gamma->shape) + " and beta " +
                       ShapeText(beta->shape) + " must both be " +
                       ShapeText(row) + " (the last axis of operand 0 " +
                       ShapeText(x->shape) + ")");
  }
  if (y->shape != x->shape) {
    return Bad(op, "result 0 has shape " + ShapeText(y->shape) +
                       ", expected " + ShapeText(x->shape) +
                       " (the shape of operand 0)");
  }
  std::vector<float> out = NewBuffer(x->data.size());
  TILEC_RETURN_IF_ERROR(
      Check(op, Normalize(In(x->data), In(m->data), In(gamma->data),
                          In(beta->data), Out(out), rows, w, op.eps)));
  Store(y, std::move(out));
  return Status::Ok();
}

}  // namespace tilec::kernels::executor
