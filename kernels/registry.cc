#include "kernels/registry.h"

#include <array>

namespace tilec::kernels {
namespace {

StatusOr<bool> Flag(std::string_view kernel, std::string_view what,
                    int64_t value) {
  if (value != 0 && value != 1) {
    return Status::BadInput(std::string(kernel) + ": param " + std::string(what) +
                         " is " + std::to_string(value) + " (0 or 1)");
  }
  return value == 1;
}

StatusOr<GeluForm> Form(std::string_view kernel, int64_t value) {
  StatusOr<GeluForm> form = GeluFormFromInt(value);
  if (!form.ok()) {
    return Status::BadInput(std::string(kernel) + ": " + form.status().message());
  }
  return form;
}

// ---------------------------------------------------------------- run

Status RunGemm(std::span<Operand> a, std::span<const int64_t> p,
               std::span<const float>) {
  StatusOr<bool> accumulate = Flag(names::kGemm, "accumulate", p[3]);
  if (!accumulate.ok()) return accumulate.status();
  return Gemm(a[0], a[1], a[2], p[0], p[1], p[2], *accumulate);
}

Status RunGemmNt(std::span<Operand> a, std::span<const int64_t> p,
                 std::span<const float> f) {
  StatusOr<bool> accumulate = Flag(names::kGemmNt, "accumulate", p[3]);
  if (!accumulate.ok()) return accumulate.status();
  return GemmNt(a[0], a[1], a[2], p[0], p[1], p[2], *accumulate, f[0]);
}

Status RunReducePartials(std::span<Operand> a, std::span<const int64_t> p,
                         std::span<const float>) {
  return ReducePartials(a.first(a.size() - 1), a.back(), p[0]);
}

Status RunAdd(std::span<Operand> a, std::span<const int64_t> p,
              std::span<const float>) {
  return Add(a[0], a[1], a[2], p[0], p[1]);
}

Status RunBiasAdd(std::span<Operand> a, std::span<const int64_t> p,
                  std::span<const float>) {
  return BiasAdd(a[0], a[1], a[2], p[0], p[1]);
}

Status RunGelu(std::span<Operand> a, std::span<const int64_t> p,
               std::span<const float>) {
  StatusOr<GeluForm> form = Form(names::kGelu, p[2]);
  if (!form.ok()) return form.status();
  return GeluKernel(a[0], a[1], p[0], p[1], *form);
}

Status RunBiasGelu(std::span<Operand> a, std::span<const int64_t> p,
                   std::span<const float>) {
  StatusOr<GeluForm> form = Form(names::kBiasGelu, p[2]);
  if (!form.ok()) return form.status();
  return BiasGelu(a[0], a[1], a[2], p[0], p[1], *form);
}

Status RunCast(std::span<Operand> a, std::span<const int64_t> p,
               std::span<const float>) {
  return Cast(a[0], a[1], p[0], p[1]);
}

Status RunLayerNorm(std::span<Operand> a, std::span<const int64_t> p,
                    std::span<const float> f) {
  return LayerNorm(a[0], a[1], a[2], a[3], p[0], p[1], f[0]);
}

Status RunLnMoments(std::span<Operand> a, std::span<const int64_t> p,
                    std::span<const float>) {
  return LnMoments(a[0], a[1], p[0], p[1]);
}

Status RunCombineMoments(std::span<Operand> a, std::span<const int64_t> p,
                         std::span<const float>) {
  return CombineMoments(a.first(a.size() - 1), a.back(), p[0]);
}

Status RunNormalize(std::span<Operand> a, std::span<const int64_t> p,
                    std::span<const float> f) {
  return Normalize(a[0], a[1], a[2], a[3], a[4], p[0], p[1], f[0]);
}

Status RunResidualMoments(std::span<Operand> a, std::span<const int64_t> p,
                          std::span<const float>) {
  return ResidualMoments(a[0], a[1], a[2], a[3], p[0], p[1]);
}

Status RunSoftmax(std::span<Operand> a, std::span<const int64_t> p,
                  std::span<const float> f) {
  return Softmax(a[0], a[1], p[0], p[1], f[0]);
}

Status RunSoftmaxState(std::span<Operand> a, std::span<const int64_t> p,
                       std::span<const float> f) {
  return SoftmaxState(a[0], a[1], p[0], p[1], f[0]);
}

Status RunCombineSoftmaxStates(std::span<Operand> a,
                               std::span<const int64_t> p,
                               std::span<const float>) {
  return CombineSoftmaxStates(a.first(a.size() - 1), a.back(), p[0]);
}

Status RunSoftmaxNormalize(std::span<Operand> a, std::span<const int64_t> p,
                           std::span<const float> f) {
  return SoftmaxNormalize(a[0], a[1], a[2], p[0], p[1], f[0]);
}

Status RunCopy(std::span<Operand> a, std::span<const int64_t> p,
               std::span<const float>) {
  return Copy(a[0], a[1], p[0]);
}

StatusOr<fb::ElementwiseFn> Fn(std::string_view kernel, int64_t value) {
  StatusOr<fb::ElementwiseFn> fn = ElementwiseFnFromInt(value);
  if (!fn.ok()) {
    return Status::BadInput(std::string(kernel) + ": " + fn.status().message());
  }
  return fn;
}

Status RunUnary(std::span<Operand> a, std::span<const int64_t> p,
                std::span<const float>) {
  StatusOr<fb::ElementwiseFn> fn = Fn(names::kUnary, p[2]);
  if (!fn.ok()) return fn.status();
  return Unary(a[0], a[1], p[0], p[1], *fn);
}

Status RunBinaryOf(std::string_view kernel, std::span<Operand> a,
                   std::span<const int64_t> p, fb::Broadcast broadcast) {
  StatusOr<fb::ElementwiseFn> fn = Fn(kernel, p[2]);
  if (!fn.ok()) return fn.status();
  StatusOr<bool> operand_first = Flag(kernel, "operand_first", p[3]);
  if (!operand_first.ok()) return operand_first.status();
  return Binary(a[0], a[1], a[2], p[0], p[1], *fn, *operand_first, broadcast);
}

Status RunBinary(std::span<Operand> a, std::span<const int64_t> p,
                 std::span<const float>) {
  return RunBinaryOf(names::kBinary, a, p, fb::Broadcast::Full);
}

Status RunBinaryRow(std::span<Operand> a, std::span<const int64_t> p,
                    std::span<const float>) {
  return RunBinaryOf(names::kBinaryRow, a, p, fb::Broadcast::Row);
}

Status RunBinaryCol(std::span<Operand> a, std::span<const int64_t> p,
                    std::span<const float>) {
  return RunBinaryOf(names::kBinaryCol, a, p, fb::Broadcast::Column);
}

Status RunScale(std::span<Operand> a, std::span<const int64_t> p,
                std::span<const float> f) {
  return ScaleKernel(a[0], a[1], p[0], p[1], f[0]);
}

// ---------------------------------------------------------------- cycles

using Args = std::span<const Operand>;
using Params = std::span<const int64_t>;
int64_t Count(Args a) { return static_cast<int64_t>(a.size()); }

StatusOr<int64_t> GemmCost(const CostModel& m, Args a, Params p, KernelPath) {
  return GemmCycles(m, a[0].dtype, p[0], p[1], p[2]);
}
StatusOr<int64_t> ReduceCost(const CostModel& m, Args a, Params p,
                             KernelPath) {
  return ReducePartialsCycles(m, p[0], Count(a) - 1);
}
StatusOr<int64_t> AddCost(const CostModel& m, Args, Params p,
                          KernelPath path) {
  return AddCycles(m, p[0], p[1], path);
}
StatusOr<int64_t> GeluCost(const CostModel& m, Args, Params p, KernelPath) {
  return GeluCycles(m, p[0], p[1]);
}
StatusOr<int64_t> BiasGeluCost(const CostModel& m, Args a, Params p,
                               KernelPath) {
  return BiasGeluCycles(m, a[2].dtype, p[0], p[1]);
}
StatusOr<int64_t> CastCost(const CostModel& m, Args, Params p, KernelPath) {
  return CastCycles(m, p[0], p[1]);
}
StatusOr<int64_t> LayerNormCost(const CostModel& m, Args a, Params p,
                                KernelPath) {
  return LayerNormCycles(m, a[3].dtype, p[0], p[1]);
}
StatusOr<int64_t> LnMomentsCost(const CostModel& m, Args, Params p,
                                KernelPath) {
  return LnMomentsCycles(m, p[0], p[1]);
}
StatusOr<int64_t> CombineCost(const CostModel& m, Args a, Params p,
                              KernelPath) {
  return CombineMomentsCycles(m, p[0], Count(a) - 1);
}
StatusOr<int64_t> NormalizeCost(const CostModel& m, Args a, Params p,
                                KernelPath) {
  return NormalizeCycles(m, a[4].dtype, p[0], p[1]);
}
StatusOr<int64_t> ResidualMomentsCost(const CostModel& m, Args, Params p,
                                      KernelPath) {
  return ResidualMomentsCycles(m, p[0], p[1]);
}
StatusOr<int64_t> SoftmaxCost(const CostModel& m, Args a, Params p,
                              KernelPath) {
  return SoftmaxCycles(m, a.back().dtype, p[0], p[1]);
}
StatusOr<int64_t> SoftmaxStateCost(const CostModel& m, Args, Params p,
                                   KernelPath) {
  return SoftmaxStateCycles(m, p[0], p[1]);
}
StatusOr<int64_t> CombineStatesCost(const CostModel& m, Args a, Params p,
                                    KernelPath) {
  return CombineSoftmaxStatesCycles(m, p[0], Count(a) - 1);
}
StatusOr<int64_t> ElementwiseCost(const CostModel& m, Args, Params p,
                                  KernelPath path) {
  StatusOr<fb::ElementwiseFn> fn = ElementwiseFnFromInt(p[2]);
  if (!fn.ok()) return fn.status();
  return ElementwiseCycles(m, *fn, p[0], p[1], path);
}
StatusOr<int64_t> ScaleCost(const CostModel& m, Args, Params p,
                            KernelPath path) {
  return ElementwiseCycles(m, fb::ElementwiseFn::Mul, p[0], p[1], path);
}
StatusOr<int64_t> CopyCost(const CostModel& m, Args, Params p, KernelPath) {
  return CopyCycles(m, p[0]);
}

// ---------------------------------------------------------------- table

constexpr std::array<std::string_view, 3> kGemmFormulas = {
    formula::kGemmFp8, formula::kGemmF16, formula::kGemmF32};
constexpr std::array<std::string_view, 1> kReduceFormulas = {
    formula::kReducePartials};
constexpr std::array<std::string_view, 1> kAddFormulas = {formula::kAdd};
constexpr std::array<std::string_view, 1> kGeluFormulas = {formula::kGelu};
constexpr std::array<std::string_view, 2> kBiasGeluFormulas = {
    formula::kBiasGelu, formula::kBiasGeluFp8};
constexpr std::array<std::string_view, 1> kCastFormulas = {formula::kCast};
constexpr std::array<std::string_view, 2> kLayerNormFormulas = {
    formula::kLayerNorm, formula::kLayerNormFp8};
constexpr std::array<std::string_view, 1> kLnMomentsFormulas = {
    formula::kLnMoments};
constexpr std::array<std::string_view, 1> kCombineFormulas = {
    formula::kMomentsCombine};
constexpr std::array<std::string_view, 2> kNormalizeFormulas = {
    formula::kNormalize, formula::kNormalizeFp8};
constexpr std::array<std::string_view, 1> kResidualMomentsFormulas = {
    formula::kResidualMoments};
constexpr std::array<std::string_view, 2> kSoftmaxFormulas = {
    formula::kSoftmax, formula::kSoftmaxFp8};
constexpr std::array<std::string_view, 1> kCopyFormulas = {formula::kCopy};
constexpr std::array<std::string_view, 2> kElementwiseFormulas = {
    formula::kAdd, formula::kGelu};

const KernelInfo kKernels[] = {
    {names::kGemm, RunGemm, GemmCost, "A[M,K] B[K,N] C[M,N]",
     "M K N accumulate", "", 3, 3, 4, 0, kGemmFormulas,
     MemoryRule::kGemmAccumulator},
    {names::kGemmNt, RunGemmNt, GemmCost, "A[M,K] B[N,K] C[M,N]",
     "M K N accumulate", "scale", 3, 3, 4, 1, kGemmFormulas,
     MemoryRule::kGemmAccumulator},
    {names::kReducePartials, RunReducePartials, ReduceCost,
     "partial[n]... out[n]", "n", "", 2, -1, 1, 0, kReduceFormulas},
    {names::kAdd, RunAdd, AddCost, "a[rows,w] b[rows,w] out[rows,w]", "rows w",
     "", 3, 3, 2, 0, kAddFormulas, MemoryRule::kBinaryInputs},
    {names::kBiasAdd, RunBiasAdd, AddCost, "x[rows,w] bias[w] out[rows,w]",
     "rows w", "", 3, 3, 2, 0, kAddFormulas, MemoryRule::kBinaryInputs},
    {names::kGelu, RunGelu, GeluCost, "x[rows,w] out[rows,w]", "rows w form",
     "", 2, 2, 3, 0, kGeluFormulas},
    {names::kBiasGelu, RunBiasGelu, BiasGeluCost,
     "x[rows,w] bias[w] out[rows,w]", "rows w form", "", 3, 3, 3, 0,
     kBiasGeluFormulas, MemoryRule::kBinaryInputs},
    {names::kCast, RunCast, CastCost, "in[rows,w] out[rows,w]", "rows w", "", 2,
     2, 2, 0, kCastFormulas},
    {names::kLayerNorm, RunLayerNorm, LayerNormCost,
     "x[rows,w] gamma[w] beta[w] out[rows,w]", "rows w", "eps", 4, 4, 2, 1,
     kLayerNormFormulas},
    {names::kLnMoments, RunLnMoments, LnMomentsCost,
     "x[rows,w] moments[rows,3]", "rows w", "", 2, 2, 2, 0, kLnMomentsFormulas},
    {names::kMomentsCombine, RunCombineMoments, CombineCost,
     "moments[rows,3]... out[rows,3]", "rows", "", 2, -1, 1, 0,
     kCombineFormulas},
    {names::kNormalize, RunNormalize, NormalizeCost,
     "x[rows,w] moments[rows,3] gamma[w] beta[w] out[rows,w]", "rows w", "eps",
     5, 5, 2, 1, kNormalizeFormulas},
    {names::kResidualMoments, RunResidualMoments, ResidualMomentsCost,
     "a[rows,w] b[rows,w] sum[rows,w] moments[rows,3]", "rows w", "", 4, 4, 2,
     0, kResidualMomentsFormulas, MemoryRule::kBinaryInputs, /*outputs=*/2},
    {names::kSoftmax, RunSoftmax, SoftmaxCost, "x[rows,w] out[rows,w]",
     "rows w", "scale", 2, 2, 2, 1, kSoftmaxFormulas},
    {names::kSoftmaxState, RunSoftmaxState, SoftmaxStateCost,
     "x[rows,w] state[rows,2]", "rows w", "scale", 2, 2, 2, 1,
     kLnMomentsFormulas},
    {names::kSoftmaxCombine, RunCombineSoftmaxStates, CombineStatesCost,
     "state[rows,2]... out[rows,2]", "rows", "", 2, -1, 1, 0, kCombineFormulas},
    {names::kSoftmaxNormalize, RunSoftmaxNormalize, SoftmaxCost,
     "x[rows,w] state[rows,2] out[rows,w]", "rows w", "scale", 3, 3, 2, 1,
     kSoftmaxFormulas},
    {names::kCopy, RunCopy, CopyCost, "src[bytes] dst[bytes]", "bytes", "", 2,
     2, 1, 0, kCopyFormulas},
    {names::kUnary, RunUnary, ElementwiseCost, "x[rows,w] out[rows,w]",
     "rows w fn", "", 2, 2, 3, 0, kElementwiseFormulas},
    {names::kBinary, RunBinary, ElementwiseCost,
     "x[rows,w] y[rows,w] out[rows,w]", "rows w fn operand_first", "", 3, 3,
     4, 0, kElementwiseFormulas, MemoryRule::kBinaryInputs},
    {names::kBinaryRow, RunBinaryRow, ElementwiseCost,
     "x[rows,w] row[w] out[rows,w]", "rows w fn operand_first", "", 3, 3, 4,
     0, kElementwiseFormulas, MemoryRule::kBinaryInputs},
    {names::kBinaryCol, RunBinaryCol, ElementwiseCost,
     "x[rows,w] col[rows] out[rows,w]", "rows w fn operand_first", "", 3, 3, 4,
     0, kElementwiseFormulas, MemoryRule::kBinaryInputs},
    {names::kScale, RunScale, ScaleCost, "x[rows,w] out[rows,w]", "rows w",
     "scale", 2, 2, 2, 1, kAddFormulas},
};

// Counts of args, params and fparams, and params that must not be negative
// (every param is a size, a flag or a form).
Status CheckCall(const KernelInfo& k, size_t args, std::span<const int64_t> p,
                 size_t fparams) {
  const std::string name(k.name);
  const bool args_ok =
      args >= static_cast<size_t>(k.min_args) &&
      (k.max_args < 0 || args <= static_cast<size_t>(k.max_args));
  if (!args_ok) {
    std::string expected = std::to_string(k.min_args);
    if (k.max_args < 0) expected = "at least " + expected;
    return Status::BadInput(name + ": expects " + expected + " args (" +
                         std::string(k.args) + "), got " +
                         std::to_string(args));
  }
  if (p.size() != static_cast<size_t>(k.num_params)) {
    return Status::BadInput(name + ": expects " + std::to_string(k.num_params) +
                         " params (" + std::string(k.params) + "), got " +
                         std::to_string(p.size()));
  }
  if (fparams != static_cast<size_t>(k.num_fparams)) {
    return Status::BadInput(
        name + ": expects " + std::to_string(k.num_fparams) + " fparams" +
        (k.fparams.empty() ? "" : " (" + std::string(k.fparams) + ")") +
        ", got " + std::to_string(fparams));
  }
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] < 0) {
      return Status::BadInput(name + ": param " + std::to_string(i) + " of (" +
                           std::string(k.params) + ") is negative (" +
                           std::to_string(p[i]) + ")");
    }
  }
  return Status::Ok();
}

StatusOr<const KernelInfo*> Lookup(std::string_view kernel) {
  const KernelInfo* info = FindKernel(kernel);
  if (info == nullptr) {
    std::string known;
    for (const KernelInfo& k : kKernels) {
      known += (known.empty() ? "" : ", ") + std::string(k.name);
    }
    return Status::BadInput("unknown kernel '" + std::string(kernel) +
                            "' (known: " + known + ")");
  }
  return info;
}

}  // namespace

std::span<const KernelInfo> RegisteredKernels() { return kKernels; }

const KernelInfo* FindKernel(std::string_view kernel) {
  for (const KernelInfo& k : kKernels) {
    if (k.name == kernel) return &k;
  }
  return nullptr;
}

Status Run(std::string_view kernel, std::span<Operand> args,
           std::span<const int64_t> params, std::span<const float> fparams) {
  StatusOr<const KernelInfo*> info = Lookup(kernel);
  if (!info.ok()) return info.status();
  if (Status s = CheckCall(**info, args.size(), params, fparams.size());
      !s.ok()) {
    return s;
  }
  return (*info)->run(args, params, fparams);
}

StatusOr<int64_t> Cycles(const CostModel& model, std::string_view kernel,
                         std::span<const Operand> args,
                         std::span<const int64_t> params,
                         std::span<const float> fparams, KernelPath path) {
  StatusOr<const KernelInfo*> info = Lookup(kernel);
  if (!info.ok()) return info.status();
  if (Status s = CheckCall(**info, args.size(), params, fparams.size());
      !s.ok()) {
    return s;
  }
  return (*info)->cycles(model, args, params, path);
}

}  // namespace tilec::kernels
