// LayerNorm of a column slice from the full rows' combined moments.

#include <cmath>

#include "kernels/kernel_names.h"
#include "kernels/kernels.h"

namespace tilec::kernels {
Status Normalize(const Operand& x, const Operand& moments,
                 const Operand& gamma, const Operand& beta, const Operand& out,
                 int64_t rows, int64_t w, float eps) {
  constexpr std::string_view kName = names::kNormalize;
  StatusOr<size_t> elems = ElementCount(kName, {rows, w});
  if (!elems.ok()) return elems.status();
  StatusOr<size_t> moment_elems = ElementCount(kName, {rows, kMomentFloats});
  if (!moment_elems.ok()) return moment_elems.status();
  const size_t width = static_cast<size_t>(w);
  if (Status s = CheckOperand(kName, "x", x, *elems); !s.ok()) return s;
  if (moments.dtype != DType::kF32) {
    return Status::BadInput("normalize: moments are " +
                         std::string(DTypeName(moments.dtype)) +
                         ", moments are F32");
  }
  if (Status s = CheckOperand(kName, "moments", moments, *moment_elems);
      !s.ok()) {
    return s;
  }
  if (Status s = CheckOperand(kName, "gamma", gamma, width); !s.ok()) return s;
  if (Status s = CheckOperand(kName, "beta", beta, width); !s.ok()) return s;
  if (Status s = CheckOperand(kName, "out", out, *elems); !s.ok()) return s;

  std::vector<float> v = LoadElements(x, *elems);
  const std::vector<float> m = LoadElements(moments, *moment_elems);
  const std::vector<float> g = LoadElements(gamma, width);
  const std::vector<float> b = LoadElements(beta, width);
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
    const float count = m[r * kMomentFloats + 0];
    const float mean = m[r * kMomentFloats + 1];
    const float m2 = m[r * kMomentFloats + 2];
    if (!(count > 0)) {
      return Status::BadInput("normalize: row " + std::to_string(r) +
                           " has moments with count " + std::to_string(count) +
                           " (must be positive)");
    }
    const float rstd = 1.0f / std::sqrt(m2 / count + eps);
    float* row = v.data() + r * width;
    for (size_t c = 0; c < width; ++c) {
      row[c] = (row[c] - mean) * rstd * g[c] + b[c];
    }
  }
  StoreElements(out, v);
  return Status::Ok();
}

StatusOr<int64_t> NormalizeCycles(const CostModel& model, DType out_dtype,
                                  int64_t rows, int64_t w) {
  return model.Cycles(
      IsFp8(out_dtype) ? formula::kNormalizeFp8 : formula::kNormalize,
      {{"rows", rows}, {"w", w}});
}

}  // namespace tilec::kernels
