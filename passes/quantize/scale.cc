#include "passes/quantize/scale.h"

#include <glog/logging.h>

#include <algorithm>
#include <bit>
#include <cmath>

#ifdef __x86_64__
#include <immintrin.h>
#endif

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

namespace {

using Histogram = MagnitudeHistogram;

// Elements binned at a time before their bins are counted.
constexpr size_t kStretch = 256;

// Consecutive elements of one tensor mostly fall in a few bins, and each
// increment would wait for the last one of its bin: interleaved copies of
// the counts, added up at the end, keep kWays increments independent. In
// 32 bits (half the cache the copies take), folded into the 64-bit counts
// at least every kFoldEvery elements.
constexpr size_t kWays = 16;
using Ways = std::array<std::array<uint32_t, Histogram::kBins>, kWays>;
constexpr size_t kFoldEvery = size_t{1} << 31;

// The class of a normal significand by its fraction bits: exactly 1, in
// (1, 1.75] (0x600000 is the fraction of 1.75), above.
uint32_t SignificandClass(uint32_t fraction) {
  return (fraction != 0) + (fraction > 0x600000u);
}

// x's bin, or -1 for a zero, an infinity or a NaN, which are not binned;
// the bits of its magnitude in *magnitude_bits.
int BinOf(float x, uint32_t* magnitude_bits) {
  const uint32_t bits = std::bit_cast<uint32_t>(x) & 0x7fffffffu;
  const uint32_t exponent = bits >> 23;
  uint32_t fraction = bits & 0x7fffffu;
  int binade = static_cast<int>(exponent) - 127;
  if (exponent - 1 >= 254) {  // not normal: zero, subnormal, inf, NaN
    if (bits == 0 || exponent == 255) return -1;
    // Subnormal: normalize exactly.
    binade = std::ilogb(std::fabs(x));
    fraction =
        std::bit_cast<uint32_t>(std::ldexp(std::fabs(x), -binade)) & 0x7fffffu;
  }
  *magnitude_bits = bits;
  return (binade - Histogram::kMinBinade) * Histogram::kClasses +
         static_cast<int>(SignificandClass(fraction));
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TILEC_HISTOGRAM_AVX512 1
// GCC 12's AVX-512 intrinsics start some results from a deliberately
// undefined vector, which -Wall reports as used uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// BinOf of data[0, n), sixteen elements at a time, into bins, up to the
// first sixteen that hold one that is not normal: returns how many it
// binned; the largest of their magnitudes' bits and *amax_bits in
// *amax_bits (finite magnitudes order as their bits do).
__attribute__((target("avx512f"))) size_t BinNormalAvx512(const float* data,
                                                          size_t n,
                                                          uint32_t* bins,
                                                          uint32_t* amax_bits) {
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff);
  const __m512i fraction_bits = _mm512_set1_epi32(0x7fffff);
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i normal_exponents = _mm512_set1_epi32(254);
  const __m512i fraction_of_1_75 = _mm512_set1_epi32(0x600000);
  const __m512i binade_bias = _mm512_set1_epi32(-127 - Histogram::kMinBinade);
  const __m512i classes = _mm512_set1_epi32(Histogram::kClasses);
  __m512i amax = _mm512_set1_epi32(static_cast<int32_t>(*amax_bits));
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i bits =
        _mm512_and_si512(_mm512_loadu_si512(data + i), magnitude);
    const __m512i exponent = _mm512_srli_epi32(bits, 23);
    // exponent - 1 >= 254, unsigned: as in BinOf.
    if (_mm512_cmpge_epu32_mask(_mm512_sub_epi32(exponent, one),
                                normal_exponents) != 0) {
      break;
    }
    amax = _mm512_max_epu32(amax, bits);
    const __m512i fraction = _mm512_and_si512(bits, fraction_bits);
    const __m512i cls = _mm512_add_epi32(
        _mm512_maskz_mov_epi32(_mm512_test_epi32_mask(fraction, fraction), one),
        _mm512_maskz_mov_epi32(
            _mm512_cmpgt_epu32_mask(fraction, fraction_of_1_75), one));
    const __m512i bin = _mm512_add_epi32(
        _mm512_mullo_epi32(_mm512_add_epi32(exponent, binade_bias), classes),
        cls);
    _mm512_storeu_si512(bins + i, bin);
  }
  *amax_bits = _mm512_reduce_max_epu32(amax);
  return i;
}
#pragma GCC diagnostic pop
#endif

// Adds `ways` into `counts` and clears them.
void Fold(Ways& ways, std::array<uint64_t, Histogram::kBins>& counts) {
  for (auto& way : ways) {
    for (size_t b = 0; b < counts.size(); ++b) counts[b] += way[b];
    way.fill(0);
  }
}

}  // namespace

void MagnitudeHistogram::Add(std::span<const float> data,
                             kernels::SimdPath path) {
  count_ += data.size();
#ifdef TILEC_HISTOGRAM_AVX512
  const bool vectors =
      path == kernels::SimdPath::kFastest && kernels::HostHasAvx512f();
#else
  (void)path;
#endif
  Ways ways{};
  uint32_t amax_bits = std::bit_cast<uint32_t>(amax_);
  std::array<uint32_t, kStretch> bins;
  size_t unfolded = 0;
  for (size_t begin = 0; begin < data.size(); begin += kStretch) {
    const std::span<const float> stretch =
        data.subspan(begin, std::min(kStretch, data.size() - begin));
    size_t binned = 0;
#ifdef TILEC_HISTOGRAM_AVX512
    if (vectors) {
      binned = BinNormalAvx512(stretch.data(), stretch.size(), bins.data(),
                               &amax_bits);
    }
#endif
    for (size_t i = 0; i < binned; ++i) ++ways[i % kWays][bins[i]];
    for (size_t i = binned; i < stretch.size(); ++i) {
      uint32_t bits = 0;
      const int bin = BinOf(stretch[i], &bits);
      if (bin < 0) continue;
      amax_bits = std::max(amax_bits, bits);
      ++ways[i % kWays][bin];
    }
    unfolded += stretch.size();
    if (unfolded >= kFoldEvery) {
      Fold(ways, counts_);
      unfolded = 0;
    }
  }
  amax_ = std::bit_cast<float>(amax_bits);
  Fold(ways, counts_);
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
