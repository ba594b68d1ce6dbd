// Scaled, numerically stable softmax over rows (attention probabilities).

#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"

namespace tilec::kernels {

Status Softmax(const Operand& x, const Operand& out, int64_t rows, int64_t w,
               float scale) {
  constexpr std::string_view kName = "softmax";
  StatusOr<size_t> elems = ElementCount(kName, {rows, w});
  if (!elems.ok()) return elems.status();
  if (Status s = CheckOperand(kName, "x", x, *elems); !s.ok()) return s;
  if (Status s = CheckOperand(kName, "out", out, *elems); !s.ok()) return s;
  const size_t width = static_cast<size_t>(w);
  std::vector<float> v = LoadElements(x, *elems);
  for (size_t r = 0; r < static_cast<size_t>(rows) && width > 0; ++r) {
    float* row = v.data() + r * width;
    for (size_t c = 0; c < width; ++c) row[c] *= scale;
    // Subtracting the row maximum keeps exp() from overflowing; the result
    // is mathematically unchanged.
    float max = row[0];
    for (size_t c = 1; c < width; ++c) max = std::max(max, row[c]);
    float sum = 0;
    for (size_t c = 0; c < width; ++c) {
      row[c] = std::exp(row[c] - max);
      sum += row[c];
    }
    const float inv = 1.0f / sum;
    for (size_t c = 0; c < width; ++c) row[c] *= inv;
  }
  StoreElements(out, v);
  return Status::Ok();
}

StatusOr<int64_t> SoftmaxCycles(const CostModel& model, int64_t rows,
                                int64_t w) {
  return model.Cycles("softmax", {{"rows", rows}, {"w", w}});
}

}  // namespace tilec::kernels
