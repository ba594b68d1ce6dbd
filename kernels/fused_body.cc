#include "kernels/fused_body.h"

#include <span>

#include "kernels/fb_dtype.h"
#include "kernels/kernel_names.h"
#include "kernels/kernels.h"
#include "kernels/registry.h"

namespace tilec::kernels {
namespace {

fb::FusedStepT Step(fb::FusedStepKind kind, int operand) {
  fb::FusedStepT s;
  s.kind = kind;
  s.operand = operand;
  return s;
}

// A trailing ln_moments reads the stored result; it writes no value.
bool WritesValue(const BodyKernel& call) {
  return call.kernel != names::kLnMoments;
}

}  // namespace

bool ReadsRow(const fb::FusedStepT& step) {
  return step.kind == fb::FusedStepKind::BiasAdd ||
         (step.kind == fb::FusedStepKind::Binary &&
          step.broadcast == fb::Broadcast::Row);
}

bool ReadsColumn(const fb::FusedStepT& step) {
  return step.kind == fb::FusedStepKind::Binary &&
         step.broadcast == fb::Broadcast::Column;
}

bool RowFree(const BodyKernel& call) {
  return !call.bias && !call.column && !call.moments;
}

StatusOr<std::vector<fb::FusedStepT>> BodySteps(const fb::OperationT& op,
                                                const fb::ValueT& result) {
  std::vector<fb::FusedStepT> steps;
  switch (op.kind) {
    case fb::OpKind::BiasAdd:
      steps.push_back(Step(fb::FusedStepKind::BiasAdd, 1));
      break;
    case fb::OpKind::Gelu:
      steps.push_back(Step(fb::FusedStepKind::Gelu, -1));
      steps.back().gelu = op.gelu;
      break;
    case fb::OpKind::Add:
      steps.push_back(Step(fb::FusedStepKind::ResidualAdd, 1));
      break;
    case fb::OpKind::Cast:
      steps.push_back(Step(fb::FusedStepKind::Cast, -1));
      steps.back().dtype = result.dtype;
      steps.back().fp8_scale_exp = result.fp8_scale_exp;
      break;
    case fb::OpKind::Fused:
      for (const auto& s : op.body) steps.push_back(*s);
      break;
    default:
      return Status::BadInput("op " + std::to_string(op.id) + " (" + op.name +
                              ") is not elementwise");
  }
  return steps;
}

StatusOr<std::vector<BodyKernel>> CompileBody(
    const std::vector<fb::FusedStepT>& steps, size_t operands, size_t results,
    const std::string& where) {
  if (steps.empty()) return Status::BadInput(where + ": empty fused body");
  std::vector<BodyKernel> out;
  for (size_t i = 0; i < steps.size();) {
    const fb::FusedStepT& s = steps[i];
    const bool has_next = i + 1 < steps.size();
    BodyKernel k;
    k.first_step = static_cast<int>(i);
    switch (s.kind) {
      case fb::FusedStepKind::BiasAdd:
        k.operand = s.operand;
        k.bias = true;
        if (has_next && steps[i + 1].kind == fb::FusedStepKind::Gelu) {
          k.kernel = names::kBiasGelu;
          k.form = static_cast<int>(steps[i + 1].gelu);
          i += 2;
          // A cast right after is folded in: the kernel stores its F32
          // result in the cast's dtype, rounding once as the cast would.
          if (i < steps.size() && steps[i].kind == fb::FusedStepKind::Cast) {
            k.dtype = steps[i].dtype;
            k.scale_exp = steps[i].fp8_scale_exp;
            i += 1;
          }
        } else {
          k.kernel = names::kBiasAdd;
          i += 1;
        }
        break;
      case fb::FusedStepKind::Gelu:
        k.kernel = names::kGelu;
        k.form = static_cast<int>(s.gelu);
        i += 1;
        break;
      case fb::FusedStepKind::ResidualAdd:
        k.operand = s.operand;
        k.binary = true;
        if (has_next && steps[i + 1].kind == fb::FusedStepKind::Moments) {
          k.kernel = names::kResidualMoments;
          k.moments = true;
          i += 2;
        } else {
          k.kernel = names::kAdd;
          i += 1;
        }
        break;
      case fb::FusedStepKind::Cast:
        k.kernel = names::kCast;
        k.dtype = s.dtype;
        k.scale_exp = s.fp8_scale_exp;
        i += 1;
        break;
      case fb::FusedStepKind::Moments:
        k.kernel = names::kLnMoments;
        k.moments = true;
        i += 1;
        break;
      case fb::FusedStepKind::Scale:
        k.kernel = names::kScale;
        k.scale = s.scale;
        i += 1;
        break;
      case fb::FusedStepKind::Unary:
      case fb::FusedStepKind::Binary: {
        const bool unary = s.kind == fb::FusedStepKind::Unary;
        if (IsUnaryFn(s.fn) != unary) {
          return Status::BadInput(
              where + ": a " + fb::EnumNameFusedStepKind(s.kind) +
              " step with the " + (unary ? "binary" : "unary") +
              " function " + fb::EnumNameElementwiseFn(s.fn));
        }
        k.fn = s.fn;
        if (unary) {
          k.kernel = names::kUnary;
        } else {
          k.operand = s.operand;
          k.operand_first = s.operand_first;
          k.bias = ReadsRow(s);
          k.column = ReadsColumn(s);
          k.binary = !k.bias && !k.column;
          k.kernel = k.bias     ? names::kBinaryRow
                     : k.column ? names::kBinaryCol
                                : names::kBinary;
        }
        i += 1;
        break;
      }
      default:
        return Status::BadInput(where + ": no tile kernel for fused step " +
                                std::string(fb::EnumNameFusedStepKind(s.kind)));
    }
    k.end_step = static_cast<int>(i);
    if (k.operand >= 0 || k.bias || k.binary || k.column) {
      if (k.operand < 1 || k.operand >= static_cast<int>(operands)) {
        return Status::BadInput(where + ": step names operand " +
                                std::to_string(k.operand) + " of " +
                                std::to_string(operands));
      }
    }
    if (k.moments && i != steps.size()) {
      return Status::BadInput(where +
                              ": a Moments step must be the body's last");
    }
    out.push_back(k);
  }
  if (out.size() == 1 && !WritesValue(out[0])) {
    return Status::BadInput(where + ": a body of only Moments has no value");
  }
  if (out.back().moments != (results == 2)) {
    return Status::BadInput(where + ": a body with Moments has two results "
                                    "(value, moments), otherwise one");
  }
  return out;
}

std::vector<int64_t> BodyKernelParams(const BodyKernel& call, int64_t rows,
                                      int64_t w) {
  std::vector<int64_t> params = {rows, w};
  if (call.kernel == names::kGelu || call.kernel == names::kBiasGelu) {
    params.push_back(call.form);
  }
  if (call.kernel == names::kUnary) params.push_back(static_cast<int>(call.fn));
  if (call.kernel == names::kBinary || call.kernel == names::kBinaryRow ||
      call.kernel == names::kBinaryCol) {
    params.push_back(static_cast<int>(call.fn));
    params.push_back(call.operand_first ? 1 : 0);
  }
  return params;
}

std::vector<float> BodyKernelFparams(const BodyKernel& call) {
  if (call.kernel == names::kScale) return {call.scale};
  return {};
}

StatusOr<int64_t> BodyKernelCycles(const CostModel& model,
                                   const BodyKernel& call, fb::DType out,
                                   int64_t rows, int64_t w) {
  StatusOr<DType> dtype = DTypeFromFb(out);
  if (!dtype.ok()) return dtype.status();
  // Operands only for their count and the output's dtype: inputs first,
  // then the value written, then the moments.
  std::vector<Operand> args;
  args.push_back(Operand{nullptr, 0, DType::kF16, 0});
  if (call.operand >= 0) args.push_back(Operand{nullptr, 0, DType::kF16, 0});
  if (WritesValue(call)) args.push_back(Operand{nullptr, 0, *dtype, 0});
  if (call.moments) args.push_back(Operand{nullptr, 0, DType::kF32, 0});
  const std::vector<int64_t> params = BodyKernelParams(call, rows, w);
  const std::vector<float> fparams = BodyKernelFparams(call);
  return Cycles(model, call.kernel, args, params, fparams);
}

fb::DType BodyKernelOutput(const std::vector<BodyKernel>& calls, size_t index,
                           fb::DType result) {
  size_t last = calls.size();
  while (last > 0 && !WritesValue(calls[last - 1])) --last;
  return index + 1 == last ? result : calls[index].dtype;
}

std::string BodyKernelNames(const std::vector<BodyKernel>& calls) {
  std::string names;
  for (const BodyKernel& call : calls) {
    names += (names.empty() ? "" : "+") + call.kernel;
  }
  return names;
}

}  // namespace tilec::kernels
