// Bias add fused with GELU, F16 or scaled FP8 output (the MLP epilogue).

#include "kernels/kernel_names.h"
#include "kernels/kernels.h"

namespace tilec::kernels {
Status BiasGelu(const Operand& x, const Operand& bias, const Operand& out,
                int64_t rows, int64_t w, GeluForm form) {
  constexpr std::string_view kName = names::kBiasGelu;
  StatusOr<size_t> elems = ElementCount(kName, {rows, w});
  if (!elems.ok()) return elems.status();
  const size_t width = static_cast<size_t>(w);
  if (Status s = CheckOperand(kName, "x", x, *elems); !s.ok()) return s;
  if (Status s = CheckOperand(kName, "bias", bias, width); !s.ok()) return s;
  if (Status s = CheckOperand(kName, "out", out, *elems); !s.ok()) return s;

  std::vector<float> v = LoadElements(x, *elems);
  const std::vector<float> b = LoadElements(bias, width);
  // The sum stays in F32 into the GELU: the fused kernel has no rounding
  // point between the two steps.
  for (size_t first = 0; first < v.size(); first += width) {
    float* row = v.data() + first;
    for (size_t c = 0; c < width; ++c) row[c] = Gelu(row[c] + b[c], form);
  }
  StoreElements(out, v);
  return Status::Ok();
}

StatusOr<int64_t> BiasGeluCycles(const CostModel& model, DType out_dtype,
                                 int64_t rows, int64_t w) {
  StatusOr<size_t> n = ElementCount(
      formula::kBiasGelu, {rows, RoundUpToGroup(w, model.vector_elements())});
  if (!n.ok()) return n.status();
  return model.Cycles(
      IsFp8(out_dtype) ? formula::kBiasGeluFp8 : formula::kBiasGelu,
      {{"n", static_cast<int64_t>(*n)}});
}

}  // namespace tilec::kernels
