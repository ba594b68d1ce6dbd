#include "passes/quantize/scale.h"

#include <glog/logging.h>

#include <algorithm>
#include <bit>
#include <cmath>

#include "formats/basics.h"

namespace tilec::quantize {

kernels::Fp8Format FormatOf(fb::DType dtype) {
  CHECK(ir::IsFp8(dtype)) << "not an FP8 dtype";
  return dtype == fb::DType::FP8E4M3 ? kernels::Fp8Format::kE4M3
                                     : kernels::Fp8Format::kE5M2;
}

float FiniteAmax(std::span<const float> data) {
  float amax = 0;
  for (float x : data) {
    const float a = std::fabs(x);
    if (std::isfinite(a) && a > amax) amax = a;
  }
  return amax;
}

int ChooseScaleExp(float amax, kernels::Fp8Format fmt, int margin) {
  if (!(amax > 0) || !std::isfinite(amax)) return 0;
  return kernels::Fp8ScaleExpForAmax(amax, fmt) - margin;
}

QuantStats Measure(std::span<const float> data, kernels::Fp8Format fmt,
                   int scale_exp) {
  MagnitudeHistogram magnitudes;
  magnitudes.Add(data);
  return magnitudes.Measure(fmt, scale_exp);
}

void MagnitudeHistogram::Add(std::span<const float> data) {
  count_ += data.size();
  // Consecutive elements of one tensor mostly fall in a few bins, and each
  // increment would wait for the last one of its bin: interleaved copies of
  // the counts, added up at the end, keep kWays increments independent.
  constexpr size_t kWays = 4;
  std::array<std::array<uint64_t, kBinades * kClasses>, kWays> ways{};
  uint32_t amax_bits = std::bit_cast<uint32_t>(amax_);
  for (size_t i = 0; i < data.size(); ++i) {
    const float x = data[i];
    const uint32_t bits = std::bit_cast<uint32_t>(x) & 0x7fffffffu;
    const uint32_t exponent = bits >> 23;
    uint32_t fraction = bits & 0x7fffffu;
    int binade = static_cast<int>(exponent) - 127;
    if (exponent - 1 >= 254) {  // not normal: zero, subnormal, inf, NaN
      if (bits == 0 || exponent == 255) continue;
      // Subnormal: normalize exactly.
      binade = std::ilogb(std::fabs(x));
      fraction = std::bit_cast<uint32_t>(std::ldexp(std::fabs(x), -binade)) &
                 0x7fffffu;
    }
    // Finite magnitudes order as their bits do.
    amax_bits = std::max(amax_bits, bits);
    // Exactly 1, in (1, 1.75] (0x600000 is the fraction of 1.75), above.
    const int cls = (fraction != 0) + (fraction > 0x600000u);
    ++ways[i % kWays][(binade - kMinBinade) * kClasses + cls];
  }
  amax_ = std::bit_cast<float>(amax_bits);
  for (const auto& way : ways) {
    for (size_t b = 0; b < counts_.size(); ++b) counts_[b] += way[b];
  }
}

// Each class is measured on one representative: saturation (the scaled
// magnitude beyond the largest finite value, which the encoder clamps) and
// flushing (read off the stored value itself) are the same for every
// element of a class.
QuantStats MagnitudeHistogram::Measure(kernels::Fp8Format fmt,
                                       int scale_exp) const {
  QuantStats stats;
  stats.amax = amax_;
  if (count_ == 0) return stats;
  const double limit = kernels::Fp8MaxFinite(fmt);
  int limit_exp = 0;
  CHECK_EQ(std::frexp(limit, &limit_exp), 0.875) << "significand is not 1.75";
  const double factor = std::ldexp(1.0, scale_exp);
  constexpr double kSignificand[kClasses] = {1.0, 1.5, 1.875};
  uint64_t saturated = 0, flushed = 0;
  for (int b = 0; b < kBinades; ++b) {
    for (int cls = 0; cls < kClasses; ++cls) {
      const uint64_t n = counts_[b * kClasses + cls];
      if (n == 0) continue;
      const float x =
          static_cast<float>(std::ldexp(kSignificand[cls], b + kMinBinade));
      if (static_cast<double>(x) * factor > limit) {
        saturated += n;
      } else if (kernels::RoundToFp8(x, fmt, scale_exp) == 0) {
        flushed += n;
      }
    }
  }
  stats.saturated = static_cast<double>(saturated) / count_;
  stats.flushed = static_cast<double>(flushed) / count_;
  return stats;
}

}  // namespace tilec::quantize
