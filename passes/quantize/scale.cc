#include "passes/quantize/scale.h"

#include <glog/logging.h>

#include <cmath>

namespace tilec::quantize {

bool IsFp8(fb::DType dtype) {
  return dtype == fb::DType::FP8E4M3 || dtype == fb::DType::FP8E5M2;
}

kernels::Fp8Format FormatOf(fb::DType dtype) {
  CHECK(IsFp8(dtype)) << "not an FP8 dtype";
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
  QuantStats stats;
  stats.amax = FiniteAmax(data);
  if (data.empty()) return stats;
  // Saturation is the scaled magnitude beyond the largest finite value (the
  // encoder clamps it); flushing is read off the stored value itself.
  const double limit = kernels::Fp8MaxFinite(fmt);
  const double factor = std::ldexp(1.0, scale_exp);
  size_t saturated = 0;
  size_t flushed = 0;
  for (float x : data) {
    if (!std::isfinite(x)) continue;
    const double scaled = std::fabs(static_cast<double>(x)) * factor;
    const float stored = kernels::RoundToFp8(x, fmt, scale_exp);
    if (scaled > limit) {
      ++saturated;
    } else if (x != 0 && stored == 0) {
      ++flushed;
    }
  }
  stats.saturated = static_cast<double>(saturated) / data.size();
  stats.flushed = static_cast<double>(flushed) / data.size();
  return stats;
}

}  // namespace tilec::quantize
