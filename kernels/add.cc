// Elementwise add (residual) and bias add.

#include "kernels/kernel_names.h"
#include "kernels/kernels.h"

namespace tilec::kernels {
namespace {

// out[r,c] = x[r,c] + y[r*y_row_stride + c]: stride w for a full operand,
// 0 for a bias row broadcast down the rows.
Status AddImpl(std::string_view name, std::string_view y_role,
               const Operand& x, const Operand& y, const Operand& out,
               int64_t rows, int64_t w, bool broadcast) {
  StatusOr<size_t> elems = ElementCount(name, {rows, w});
  if (!elems.ok()) return elems.status();
  const size_t y_elems = broadcast ? static_cast<size_t>(w) : *elems;
  if (Status s = CheckOperand(name, "x", x, *elems); !s.ok()) return s;
  if (Status s = CheckOperand(name, y_role, y, y_elems); !s.ok()) return s;
  if (Status s = CheckOperand(name, "out", out, *elems); !s.ok()) return s;

  std::vector<float> xf = LoadElements(x, *elems);
  const std::vector<float> yf = LoadElements(y, y_elems);
  const size_t width = static_cast<size_t>(w);
  // Row by row, so that no element pays for a division to find its column.
  for (size_t first = 0; first < xf.size(); first += width) {
    float* row = xf.data() + first;
    const float* add = yf.data() + (broadcast ? 0 : first);
    for (size_t c = 0; c < width; ++c) row[c] += add[c];
  }
  StoreElements(out, xf);
  return Status::Ok();
}

}  // namespace

Status Add(const Operand& a, const Operand& b, const Operand& out,
           int64_t rows, int64_t w) {
  return AddImpl(names::kAdd, "b", a, b, out, rows, w, /*broadcast=*/false);
}

Status BiasAdd(const Operand& x, const Operand& bias, const Operand& out,
               int64_t rows, int64_t w) {
  return AddImpl(names::kBiasAdd, "bias", x, bias, out, rows, w,
                 /*broadcast=*/true);
}

StatusOr<int64_t> AddCycles(const CostModel& model, int64_t rows, int64_t w,
                            KernelPath path) {
  StatusOr<size_t> n = ElementCount(
      formula::kAdd, {rows, RoundUpToGroup(w, model.vector_elements())});
  if (!n.ok()) return n.status();
  return model.Cycles(formula::kAdd, {{"n", static_cast<int64_t>(*n)}}, path);
}

}  // namespace tilec::kernels
