// GELU in its tanh, erf and quick (sigmoid) forms.

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

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

namespace {

constexpr size_t kF16Patterns = size_t{1} << 16;
constexpr size_t kGeluForms = 3;  // GeluForm's values
using F16Table = std::array<float, kF16Patterns>;

// Every F16 bit pattern decoded as LoadElements decodes it, and Gelu of
// each for one form.
struct GeluOfF16 {
  F16Table x, gelu;
};

// For `form`, made once. An F16 value has only 2^16 patterns, so a lookup
// gives Gelu's own result for it, bit for bit, at a fraction of the cost
// of std::tanh (the reference runs GELU on every layer's 729 x 4304 F16
// values, twice in quantize-fp8).
const GeluOfF16& GeluOfEveryF16(GeluForm form) {
  static std::array<GeluOfF16, kGeluForms> tables;
  static std::array<std::once_flag, kGeluForms> made;
  const size_t f = static_cast<size_t>(form);
  std::call_once(made[f], [&] {
    std::vector<uint8_t> patterns(2 * kF16Patterns);  // little-endian
    for (size_t i = 0; i < kF16Patterns; ++i) {
      patterns[2 * i] = static_cast<uint8_t>(i);
      patterns[2 * i + 1] = static_cast<uint8_t>(i >> 8);
    }
    const std::vector<float> x = LoadElements(
        {patterns.data(), patterns.size(), DType::kF16, 0}, kF16Patterns);
    for (size_t i = 0; i < kF16Patterns; ++i) {
      tables[f].x[i] = x[i];
      tables[f].gelu[i] = Gelu(x[i], form);
    }
  });
  return tables[f];
}

size_t F16Pattern(const uint8_t* le) { return le[0] | size_t{le[1]} << 8; }

// GELU of F16 elements: every one looked up.
void GeluOfF16Elements(const uint8_t* x, std::span<float> v,
                       const GeluOfF16& table) {
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = table.gelu[F16Pattern(x + 2 * i)];
  }
}

// GELU of F32 elements, in place: those that are F16 values (every one
// where x holds an F16 tensor in F32, as the reference executor passes
// it), found by rounding to F16 and back, looked up; the others computed.
void GeluOfF32Elements(std::span<float> v, GeluForm form,
                       const GeluOfF16& table) {
  constexpr size_t kBlock = 1024;
  uint8_t halves[2 * kBlock];
  for (size_t begin = 0; begin < v.size(); begin += kBlock) {
    const std::span<float> block =
        v.subspan(begin, std::min(kBlock, v.size() - begin));
    StoreElements({halves, 2 * block.size(), DType::kF16, 0}, block);
    for (size_t i = 0; i < block.size(); ++i) {
      const size_t h = F16Pattern(halves + 2 * i);
      float& e = block[i];
      e = std::bit_cast<uint32_t>(table.x[h]) == std::bit_cast<uint32_t>(e)
              ? table.gelu[h]
              : Gelu(e, form);
    }
  }
}

}  // namespace

Status GeluKernel(const Operand& x, const Operand& out, int64_t rows,
                  int64_t w, GeluForm form) {
  constexpr std::string_view kName = names::kGelu;
  StatusOr<size_t> elems = ElementCount(kName, {rows, w});
  if (!elems.ok()) return elems.status();
  if (Status s = CheckOperand(kName, "x", x, *elems); !s.ok()) return s;
  if (Status s = CheckOperand(kName, "out", out, *elems); !s.ok()) return s;
  const bool unscaled = x.scale_exp == 0;
  const bool tabulated = static_cast<size_t>(form) < kGeluForms;
  std::vector<float> v;
  if (tabulated && unscaled && x.dtype == DType::kF16) {
    v.resize(*elems);
    GeluOfF16Elements(x.data, v, GeluOfEveryF16(form));
  } else {
    v = LoadElements(x, *elems);
    if (tabulated && unscaled && x.dtype == DType::kF32) {
      GeluOfF32Elements(v, form, GeluOfEveryF16(form));
    } else {
      for (float& e : v) e = Gelu(e, form);
    }
  }
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
