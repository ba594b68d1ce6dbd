// Dtype conversion between F32, F16, BF16 and scaled FP8.

#include "kernels/kernel_names.h"
#include "kernels/kernels.h"

namespace tilec::kernels {

Status Cast(const Operand& in, const Operand& out, int64_t rows, int64_t w) {
  constexpr std::string_view kName = names::kCast;
  StatusOr<size_t> elems = ElementCount(kName, {rows, w});
  if (!elems.ok()) return elems.status();
  if (Status s = CheckOperand(kName, "in", in, *elems); !s.ok()) return s;
  if (Status s = CheckOperand(kName, "out", out, *elems); !s.ok()) return s;
  // Stored values decode exactly to F32 (unless a scale pushes them out of
  // F32's normal range), so going through F32 rounds once, into the output
  // format.
  StoreElements(out, LoadElements(in, *elems));
  return Status::Ok();
}

StatusOr<int64_t> CastCycles(const CostModel& model, int64_t rows, int64_t w) {
  StatusOr<size_t> n = ElementCount(
      formula::kCast, {rows, RoundUpToGroup(w, model.vector_elements())});
  if (!n.ok()) return n.status();
  return model.Cycles(formula::kCast, {{"n", static_cast<int64_t>(*n)}});
}

}  // namespace tilec::kernels
