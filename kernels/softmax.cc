// Scaled, numerically stable softmax over rows (attention probabilities):
// on complete rows in one kernel, or over column slices of a split row as
// a partial state (max, sum of exponentials), a combination of the states
// and a normalization.

#include <algorithm>
#include <cmath>

#include "kernels/kernel_names.h"
#include "kernels/kernels.h"

namespace tilec::kernels {
namespace {

constexpr int kStateWidth = 2;  // {max, sum exp(z - max)} per row

// The state of one row of z = x * scale, summed in column order.
void RowState(const float* x, size_t width, float scale, float* state) {
  float max = x[0] * scale;
  for (size_t c = 1; c < width; ++c) max = std::max(max, x[c] * scale);
  float sum = 0;
  for (size_t c = 0; c < width; ++c) sum += std::exp(x[c] * scale - max);
  state[0] = max;
  state[1] = sum;
}

std::string_view SoftmaxFormula(DType out) {
  return IsFp8(out) ? formula::kSoftmaxFp8 : formula::kSoftmax;
}

}  // namespace

Status Softmax(const Operand& x, const Operand& out, int64_t rows, int64_t w,
               float scale) {
  constexpr std::string_view kName = names::kSoftmax;
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

StatusOr<int64_t> SoftmaxCycles(const CostModel& model, DType out_dtype,
                                int64_t rows, int64_t w) {
  return model.Cycles(SoftmaxFormula(out_dtype), {{"rows", rows}, {"w", w}});
}

Status SoftmaxState(const Operand& x, const Operand& state, int64_t rows,
                    int64_t w, float scale) {
  constexpr std::string_view kName = names::kSoftmaxState;
  StatusOr<size_t> elems = ElementCount(kName, {rows, w});
  if (!elems.ok()) return elems.status();
  StatusOr<size_t> state_elems = ElementCount(kName, {rows, kStateWidth});
  if (!state_elems.ok()) return state_elems.status();
  if (Status s = CheckOperand(kName, "x", x, *elems); !s.ok()) return s;
  if (Status s = CheckOperand(kName, "state", state, *state_elems); !s.ok()) {
    return s;
  }
  if (state.dtype != DType::kF32) {
    return Status::BadInput("softmax_state: the state is F32");
  }
  if (w < 1) return Status::BadInput("softmax_state: a row needs a column");
  const std::vector<float> v = LoadElements(x, *elems);
  std::vector<float> out(*state_elems);
  for (int64_t r = 0; r < rows; ++r) {
    RowState(v.data() + r * w, static_cast<size_t>(w), scale,
             out.data() + r * kStateWidth);
  }
  StoreElements(state, out);
  return Status::Ok();
}

StatusOr<int64_t> SoftmaxStateCycles(const CostModel& model, int64_t rows,
                                     int64_t w) {
  return model.Cycles(formula::kLnMoments, {{"rows", rows}, {"w", w}});
}

Status CombineSoftmaxStates(std::span<const Operand> partials,
                            const Operand& out, int64_t rows) {
  constexpr std::string_view kName = names::kSoftmaxCombine;
  StatusOr<size_t> elems = ElementCount(kName, {rows, kStateWidth});
  if (!elems.ok()) return elems.status();
  if (partials.empty()) return Status::BadInput("softmax_combine: no states");
  std::vector<std::vector<float>> states;
  for (size_t p = 0; p < partials.size(); ++p) {
    if (Status s = CheckOperand(kName, "state " + std::to_string(p),
                                partials[p], *elems);
        !s.ok()) {
      return s;
    }
    states.push_back(LoadElements(partials[p], *elems));
  }
  if (Status s = CheckOperand(kName, "out", out, *elems); !s.ok()) return s;
  std::vector<float> combined(*elems);
  for (int64_t r = 0; r < rows; ++r) {
    float max = states[0][r * kStateWidth];
    for (const auto& s : states) max = std::max(max, s[r * kStateWidth]);
    float sum = 0;
    for (const auto& s : states) {
      sum += s[r * kStateWidth + 1] * std::exp(s[r * kStateWidth] - max);
    }
    combined[r * kStateWidth] = max;
    combined[r * kStateWidth + 1] = sum;
  }
  StoreElements(out, combined);
  return Status::Ok();
}

StatusOr<int64_t> CombineSoftmaxStatesCycles(const CostModel& model,
                                             int64_t rows, int64_t partials) {
  return model.Cycles(formula::kMomentsCombine,
                      {{"rows", rows}, {"P", partials}});
}

Status SoftmaxNormalize(const Operand& x, const Operand& state,
                        const Operand& out, int64_t rows, int64_t w,
                        float scale) {
  constexpr std::string_view kName = names::kSoftmaxNormalize;
  StatusOr<size_t> elems = ElementCount(kName, {rows, w});
  if (!elems.ok()) return elems.status();
  StatusOr<size_t> state_elems = ElementCount(kName, {rows, kStateWidth});
  if (!state_elems.ok()) return state_elems.status();
  if (Status s = CheckOperand(kName, "x", x, *elems); !s.ok()) return s;
  if (Status s = CheckOperand(kName, "state", state, *state_elems); !s.ok()) {
    return s;
  }
  if (Status s = CheckOperand(kName, "out", out, *elems); !s.ok()) return s;
  std::vector<float> v = LoadElements(x, *elems);
  const std::vector<float> st = LoadElements(state, *state_elems);
  for (int64_t r = 0; r < rows; ++r) {
    const float max = st[r * kStateWidth];
    const float inv = 1.0f / st[r * kStateWidth + 1];
    for (int64_t c = 0; c < w; ++c) {
      float& z = v[r * w + c];
      z = std::exp(z * scale - max) * inv;
    }
  }
  StoreElements(out, v);
  return Status::Ok();
}

}  // namespace tilec::kernels
