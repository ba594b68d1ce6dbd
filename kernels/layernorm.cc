// LayerNorm over complete rows held by one tile.

#include <cmath>

#include "kernels/kernel_names.h"
#include "kernels/kernels.h"

namespace tilec::kernels {
Status LayerNorm(const Operand& x, const Operand& gamma, const Operand& beta,
                 const Operand& out, int64_t rows, int64_t w, float eps) {
  constexpr std::string_view kName = names::kLayerNorm;
  StatusOr<size_t> elems = ElementCount(kName, {rows, w});
  if (!elems.ok()) return elems.status();
  const size_t width = static_cast<size_t>(w);
  if (Status s = CheckOperand(kName, "x", x, *elems); !s.ok()) return s;
  if (Status s = CheckOperand(kName, "gamma", gamma, width); !s.ok()) return s;
  if (Status s = CheckOperand(kName, "beta", beta, width); !s.ok()) return s;
  if (Status s = CheckOperand(kName, "out", out, *elems); !s.ok()) return s;
  if (w == 0) return Status::Ok();  // no elements, and no mean to divide by

  std::vector<float> v = LoadElements(x, *elems);
  const std::vector<float> g = LoadElements(gamma, width);
  const std::vector<float> b = LoadElements(beta, width);
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
    float* row = v.data() + r * width;
    // Two passes (mean, then squared deviations): F32 sums of squares about
    // zero lose the variance of rows with a large mean.
    float sum = 0;
    for (size_t c = 0; c < width; ++c) sum += row[c];
    const float mean = sum / static_cast<float>(width);
    float m2 = 0;
    for (size_t c = 0; c < width; ++c) {
      const float d = row[c] - mean;
      m2 += d * d;
    }
    const float rstd = 1.0f / std::sqrt(m2 / static_cast<float>(width) + eps);
    for (size_t c = 0; c < width; ++c) {
      row[c] = (row[c] - mean) * rstd * g[c] + b[c];
    }
  }
  StoreElements(out, v);
  return Status::Ok();
}

StatusOr<int64_t> LayerNormCycles(const CostModel& model, DType out_dtype,
                                  int64_t rows, int64_t w) {
  return model.Cycles(
      IsFp8(out_dtype) ? formula::kLayerNormFp8 : formula::kLayerNorm,
      {{"rows", rows}, {"w", w}});
}

}  // namespace tilec::kernels
