// Reduction of K-split GEMM partials on their output owner.

#include "kernels/kernel_names.h"
#include "kernels/kernels.h"

namespace tilec::kernels {

Status ReducePartials(std::span<const Operand> partials, const Operand& out,
                      int64_t n) {
  constexpr std::string_view kName = names::kReducePartials;
  StatusOr<size_t> elems = ElementCount(kName, {n});
  if (!elems.ok()) return elems.status();
  if (partials.empty()) {
    return Status::BadInput("reduce_partials: no partials to reduce");
  }
  for (size_t p = 0; p < partials.size(); ++p) {
    const std::string role = "partial " + std::to_string(p);
    if (Status s = CheckOperand(kName, role, partials[p], *elems); !s.ok()) {
      return s;
    }
  }
  if (Status s = CheckOperand(kName, "out", out, *elems); !s.ok()) return s;

  // Summed into a separate F32 array so that out may alias any partial.
  std::vector<float> sum = LoadElements(partials[0], *elems);
  for (size_t p = 1; p < partials.size(); ++p) {
    const std::vector<float> part = LoadElements(partials[p], *elems);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
  }
  StoreElements(out, sum);
  return Status::Ok();
}

StatusOr<int64_t> ReducePartialsCycles(const CostModel& model, int64_t n,
                                       int64_t partials) {
  return model.Cycles(formula::kReducePartials, {{"n", n}, {"P", partials}});
}

}  // namespace tilec::kernels
