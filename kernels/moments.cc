// LayerNorm statistics split over tiles: partial moments of a column slice,
// Chan's combination of partial moments, and the residual add fused with the
// partial moments of its result.

#include "kernels/kernel_names.h"
#include "kernels/kernels.h"

namespace tilec::kernels {
namespace {

Status CheckMoments(std::string_view kernel, std::string_view role,
                    const Operand& op, int64_t rows) {
  if (op.dtype != DType::kF32) {
    return Status::BadInput(std::string(kernel) + ": moments operand " +
                         std::string(role) + " is " +
                         std::string(DTypeName(op.dtype)) +
                         ", moments are F32");
  }
  StatusOr<size_t> elems = ElementCount(kernel, {rows, kMomentFloats});
  if (!elems.ok()) return elems.status();
  return CheckOperand(kernel, role, op, *elems);
}

// {count, mean, M2} of each row of v [rows, w], two-pass in F32.
std::vector<float> RowMoments(const std::vector<float>& v, size_t rows,
                              size_t w) {
  std::vector<float> moments(rows * kMomentFloats, 0.0f);
  for (size_t r = 0; r < rows && w > 0; ++r) {
    const float* row = v.data() + r * w;
    float sum = 0;
    for (size_t c = 0; c < w; ++c) sum += row[c];
    const float mean = sum / static_cast<float>(w);
    float m2 = 0;
    for (size_t c = 0; c < w; ++c) {
      const float d = row[c] - mean;
      m2 += d * d;
    }
    moments[r * kMomentFloats + 0] = static_cast<float>(w);
    moments[r * kMomentFloats + 1] = mean;
    moments[r * kMomentFloats + 2] = m2;
  }
  return moments;
}

}  // namespace

Status LnMoments(const Operand& x, const Operand& moments, int64_t rows,
                 int64_t w) {
  constexpr std::string_view kName = names::kLnMoments;
  StatusOr<size_t> elems = ElementCount(kName, {rows, w});
  if (!elems.ok()) return elems.status();
  if (Status s = CheckOperand(kName, "x", x, *elems); !s.ok()) return s;
  if (Status s = CheckMoments(kName, "moments", moments, rows); !s.ok()) {
    return s;
  }
  StoreElements(moments, RowMoments(LoadElements(x, *elems),
                                    static_cast<size_t>(rows),
                                    static_cast<size_t>(w)));
  return Status::Ok();
}

StatusOr<int64_t> LnMomentsCycles(const CostModel& model, int64_t rows,
                                  int64_t w) {
  return model.Cycles(formula::kLnMoments, {{"rows", rows}, {"w", w}});
}

Status CombineMoments(std::span<const Operand> partials, const Operand& out,
                      int64_t rows) {
  constexpr std::string_view kName = names::kMomentsCombine;
  if (partials.empty()) {
    return Status::BadInput("moments_combine: no partial moments to combine");
  }
  for (size_t p = 0; p < partials.size(); ++p) {
    const std::string role = "partial " + std::to_string(p);
    if (Status s = CheckMoments(kName, role, partials[p], rows); !s.ok()) {
      return s;
    }
  }
  if (Status s = CheckMoments(kName, "out", out, rows); !s.ok()) return s;

  const size_t n = static_cast<size_t>(rows) * kMomentFloats;
  std::vector<float> acc = LoadElements(partials[0], n);
  for (size_t p = 1; p < partials.size(); ++p) {
    const std::vector<float> part = LoadElements(partials[p], n);
    for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
      float* a = acc.data() + r * kMomentFloats;
      const float* b = part.data() + r * kMomentFloats;
      const float count_a = a[0], count_b = b[0];
      if (count_b <= 0) continue;
      if (count_a <= 0) {
        a[0] = b[0], a[1] = b[1], a[2] = b[2];
        continue;
      }
      // Chan et al.: merge two (count, mean, M2) sets without revisiting
      // the elements; the delta^2 term restores the spread between means.
      const float count = count_a + count_b;
      const float delta = b[1] - a[1];
      a[1] += delta * (count_b / count);
      a[2] += b[2] + delta * delta * (count_a * count_b / count);
      a[0] = count;
    }
  }
  StoreElements(out, acc);
  return Status::Ok();
}

StatusOr<int64_t> CombineMomentsCycles(const CostModel& model, int64_t rows,
                                       int64_t partials) {
  return model.Cycles(formula::kMomentsCombine,
                      {{"rows", rows}, {"P", partials}});
}

Status ResidualMoments(const Operand& a, const Operand& b, const Operand& sum,
                       const Operand& moments, int64_t rows, int64_t w) {
  constexpr std::string_view kName = names::kResidualMoments;
  StatusOr<size_t> elems = ElementCount(kName, {rows, w});
  if (!elems.ok()) return elems.status();
  if (Status s = CheckOperand(kName, "a", a, *elems); !s.ok()) return s;
  if (Status s = CheckOperand(kName, "b", b, *elems); !s.ok()) return s;
  if (Status s = CheckOperand(kName, "sum", sum, *elems); !s.ok()) return s;
  if (Status s = CheckMoments(kName, "moments", moments, rows); !s.ok()) {
    return s;
  }
  std::vector<float> v = LoadElements(a, *elems);
  const std::vector<float> bv = LoadElements(b, *elems);
  for (size_t i = 0; i < v.size(); ++i) v[i] += bv[i];
  StoreElements(sum, v);
  // Statistics of the stored (rounded) sum: that is what the later
  // normalize reads, so both agree with an unfused add + LayerNorm.
  v = LoadElements(sum, *elems);
  StoreElements(moments, RowMoments(v, static_cast<size_t>(rows),
                                    static_cast<size_t>(w)));
  return Status::Ok();
}

StatusOr<int64_t> ResidualMomentsCycles(const CostModel& model, int64_t rows,
                                        int64_t w) {
  return model.Cycles(formula::kResidualMoments, {{"rows", rows}, {"w", w}});
}

}  // namespace tilec::kernels
