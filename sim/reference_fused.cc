// The reference executor's fused ops: a Fused op's body steps run in order
// over one row-major value (docs/fusion.md).

#include "sim/reference_executor.h"
#include "sim/tensor_data.h"

namespace tilec::kernels::executor {

Status Executor::StepOperand(const fb::OperationT& op, size_t step_index,
                             const fb::FusedStepT& step,
                             const std::vector<int64_t>& expected,
                             const ReferenceTensor** tensor) const {
  const char* kind = fb::EnumNameFusedStepKind(step.kind);
  const std::string where =
      "body step " + std::to_string(step_index) + " (" + kind + ")";
  if (step.operand < 0 ||
      static_cast<size_t>(step.operand) >= op.operands.size()) {
    return Bad(op, where + " names operand " + std::to_string(step.operand) +
                       ", the op has " + std::to_string(op.operands.size()));
  }
  TILEC_RETURN_IF_ERROR(Input(op, static_cast<size_t>(step.operand), tensor));
  if ((*tensor)->shape != expected) {
    return Bad(op, where + ": operand " + std::to_string(step.operand) +
                       " has shape " + ShapeText((*tensor)->shape) +
                       ", expected " + ShapeText(expected));
  }
  return Status::Ok();
}

Status Executor::FusedValuesOf(const fb::OperationT& op, FusedValues* f) {
  if (op.operands.empty() || op.results.empty() || op.results.size() > 2) {
    return Bad(op, "expected at least 1 operand and 1 or 2 results, got " +
                       std::to_string(op.operands.size()) + " and " +
                       std::to_string(op.results.size()));
  }
  const ReferenceTensor*& x = f->x;
  ReferenceTensor*& y = f->y;
  TILEC_RETURN_IF_ERROR(Input(op, 0, &x));
  TILEC_RETURN_IF_ERROR(Output(op, 0, &y));
  if (y->shape != x->shape) {
    return Bad(op, "result 0 has shape " + ShapeText(y->shape) +
                       ", expected " + ShapeText(x->shape) +
                       " (the shape of operand 0)");
  }
  RowsAndWidth(x->shape, &f->rows, &f->w);
  if (op.results.size() == 2) {
    TILEC_RETURN_IF_ERROR(Output(op, 1, &f->moments_out));
    TILEC_RETURN_IF_ERROR(
        CheckMomentsValue(op, *f->moments_out, f->rows, "result 1"));
    const bool has_moments =
        std::any_of(op.body.begin(), op.body.end(), [](const auto& step) {
          return step != nullptr && step->kind == fb::FusedStepKind::Moments;
        });
    if (!has_moments) {
      return Bad(op, "has a second result but no Moments step to fill it");
    }
  }
  return Status::Ok();
}

Status Executor::RunFusedStep(const fb::OperationT& op, size_t i,
                              const FusedValues& f, FusedState* state) {
  const ReferenceTensor* x = f.x;
  const ReferenceTensor* y = f.y;
  ReferenceTensor* moments_out = f.moments_out;
  const int64_t rows = f.rows, w = f.w;
  std::vector<float>& v = state->v;
  std::vector<float>& moments = state->moments;
  bool& moments_done = state->moments_done;
  if (op.body[i] == nullptr) return Bad(op, "empty body step");
  const fb::FusedStepT& step = *op.body[i];
  const ReferenceTensor* operand = nullptr;
  switch (step.kind) {
    case fb::FusedStepKind::BiasAdd:
      TILEC_RETURN_IF_ERROR(StepOperand(op, i, step, {w}, &operand));
      TILEC_RETURN_IF_ERROR(
          Check(op, BiasAdd(In(v), In(operand->data), Out(v), rows, w)));
      break;
    case fb::FusedStepKind::Gelu: {
      GeluForm form = GeluForm::kTanh;
      TILEC_RETURN_IF_ERROR(GeluFormOf(op, step.gelu, &form));
      TILEC_RETURN_IF_ERROR(
          ByRows(op, rows, w, {&v}, [&](int64_t r0, int64_t n) {
            return GeluKernel(In(v.data() + r0 * w, n * w),
                              Out(v.data() + r0 * w, n * w), n, w, form);
          }));
      break;
    }
    case fb::FusedStepKind::Cast:
      if (step.dtype < fb::DType::MIN || step.dtype > fb::DType::MAX) {
        return Bad(op, "body step " + std::to_string(i) +
                           " casts to unknown dtype " +
                           std::to_string(static_cast<int>(step.dtype)));
      }
      TILEC_RETURN_IF_ERROR(
          CastInPlace(op, step.dtype, step.fp8_scale_exp, &v));
      break;
    case fb::FusedStepKind::ResidualAdd:
      TILEC_RETURN_IF_ERROR(StepOperand(op, i, step, x->shape, &operand));
      TILEC_RETURN_IF_ERROR(
          Check(op, Add(In(v), In(operand->data), Out(v), rows, w)));
      break;
    case fb::FusedStepKind::Scale:
      TILEC_RETURN_IF_ERROR(
          Check(op, ScaleKernel(In(v), Out(v), rows, w, step.scale)));
      break;
    case fb::FusedStepKind::Unary:
      if (!IsUnaryFn(step.fn)) {
        return Bad(op, "body step " + std::to_string(i) +
                           " is Unary with a binary function");
      }
      TILEC_RETURN_IF_ERROR(
          Check(op, Unary(In(v), Out(v), rows, w, step.fn)));
      break;
    case fb::FusedStepKind::Binary: {
      if (IsUnaryFn(step.fn)) {
        return Bad(op, "body step " + std::to_string(i) +
                           " is Binary with a unary function");
      }
      const std::vector<int64_t> operand_shape =
          step.broadcast == fb::Broadcast::Row ? std::vector<int64_t>{w}
          : step.broadcast == fb::Broadcast::Column
              ? std::vector<int64_t>{rows, 1}
              : x->shape;
      TILEC_RETURN_IF_ERROR(
          StepOperand(op, i, step, operand_shape, &operand));
      TILEC_RETURN_IF_ERROR(
          Check(op, Binary(In(v), In(operand->data), Out(v), rows, w,
                           step.fn, step.operand_first, step.broadcast)));
      break;
    }
    case fb::FusedStepKind::Moments: {
      if (moments_out == nullptr) break;  // no result to fill: skipped
      if (moments_done) {
        return Bad(op, "has more than one Moments step");
      }
      // Statistics of what result 0 stores, as residual_moments
      // computes them from the stored sum.
      std::vector<float> stored = v;
      RoundToStored(y->dtype, y->fp8_scale_exp, stored);
      moments.resize(static_cast<size_t>(rows) * kMomentFloats);
      TILEC_RETURN_IF_ERROR(
          Check(op, LnMoments(In(stored), Out(moments), rows, w)));
      moments_done = true;
      break;
    }
    default:
      return Bad(op, "body step " + std::to_string(i) +
                         " has unknown kind " +
                         std::to_string(static_cast<int>(step.kind)));
  }

  return Status::Ok();
}

Status Executor::RunFused(const fb::OperationT& op) {
  FusedValues f;
  TILEC_RETURN_IF_ERROR(FusedValuesOf(op, &f));
  FusedState state;
  state.v = f.x->data;
  for (size_t i = 0; i < op.body.size(); ++i) {
    TILEC_RETURN_IF_ERROR(RunFusedStep(op, i, f, &state));
  }
  Store(f.y, std::move(state.v));
  if (f.moments_out != nullptr) Store(f.moments_out, std::move(state.moments));
  return Status::Ok();
}

}  // namespace tilec::kernels::executor
