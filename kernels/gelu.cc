// GELU in its tanh, erf and quick (sigmoid) forms.

#include <cmath>

#include "kernels/kernel_names.h"
#include "kernels/kernels.h"

namespace tilec::kernels {

float Gelu(float x, GeluForm form) {
  switch (form) {
    case GeluForm::kTanh: {
      constexpr float kSqrt2OverPi = 0.7978845608028654f;
      const float inner = kSqrt2OverPi * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.0f + std::tanh(inner));
    }
    case GeluForm::kErf: {
      constexpr float kInvSqrt2 = 0.7071067811865476f;
      return 0.5f * x * (1.0f + std::erf(x * kInvSqrt2));
    }
    case GeluForm::kQuick:
      return x / (1.0f + std::exp(-1.702f * x));
  }
  return x;  // unreachable: forms are checked by GeluFormFromInt
}

Status GeluKernel(const Operand& x, const Operand& out, int64_t rows,
                  int64_t w, GeluForm form) {
  constexpr std::string_view kName = names::kGelu;
  StatusOr<size_t> elems = ElementCount(kName, {rows, w});
  if (!elems.ok()) return elems.status();
  if (Status s = CheckOperand(kName, "x", x, *elems); !s.ok()) return s;
  if (Status s = CheckOperand(kName, "out", out, *elems); !s.ok()) return s;
  std::vector<float> v = LoadElements(x, *elems);
  for (float& e : v) e = Gelu(e, form);
  StoreElements(out, v);
  return Status::Ok();
}

StatusOr<int64_t> GeluCycles(const CostModel& model, int64_t rows, int64_t w) {
  StatusOr<size_t> n = ElementCount(
      formula::kGelu, {rows, RoundUpToGroup(w, model.vector_elements())});
  if (!n.ok()) return n.status();
  return model.Cycles(formula::kGelu, {{"n", static_cast<int64_t>(*n)}});
}

}  // namespace tilec::kernels
