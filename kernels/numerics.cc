#include "kernels/numerics.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "glog/logging.h"
#include "kernels/host_cpu.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#endif

namespace tilec::kernels {
namespace {

// Scale exponents beyond this move every float out of every format's range
// (float spans 2^-149..2^128), so clamping changes no result but keeps the
// exponent arithmetic below far from int overflow.
constexpr int kMaxScaleExp = 1024;

inline int ClampScale(int scale_exp) {
  return std::clamp(scale_exp, -kMaxScaleExp, kMaxScaleExp);
}

// v * 2^e with a single rounding. Builds 2^e from bits when it is a normal
// float (the common case) instead of calling std::pow/ldexp per element.
inline float ScaleByPow2(float v, int e) {
  if (e == 0) return v;
  if (e >= -126 && e <= 127) {
    return v * std::bit_cast<float>(static_cast<uint32_t>(e + 127) << 23);
  }
  return std::ldexp(v, ClampScale(e));
}

// Rounds the magnitude of a finite, non-zero float (given as its bits with
// the sign cleared) times 2^scale_exp to a binary format with kMantBits
// stored mantissa bits and exponent bias kBias, round to nearest even.
//
// Returns the magnitude code (exponent field << kMantBits | mantissa) as if
// the exponent field were unbounded above; callers compare it with their
// largest finite code to detect overflow. A rounding carry out of the
// mantissa propagates into the exponent field, which is exactly what the
// code layout wants (including subnormal -> smallest normal).
template <int kMantBits, int kBias>
inline uint32_t RoundMagnitude(uint32_t abs_bits, int scale_exp) {
  static_assert(kMantBits >= 1 && kMantBits <= 10);
  uint32_t sig;  // Significand with its leading one at bit 23.
  int exp;       // Unbiased exponent of that leading one.
  const uint32_t exp_field = abs_bits >> 23;
  const uint32_t mant = abs_bits & 0x7FFFFF;
  if (exp_field != 0) {
    sig = mant | 0x800000;
    exp = static_cast<int>(exp_field) - 127;
  } else {
    // Float subnormal: normalize so scaled subnormals round like any value.
    const int shift = std::countl_zero(mant) - 8;
    sig = mant << shift;
    exp = -126 - shift;
  }
  exp += ClampScale(scale_exp);

  // Written without data-dependent branches: random tensor data makes
  // subnormal/rounding branches mispredict often.
  constexpr int kMinNormalExp = 1 - kBias;
  // Below the normal range the grid spacing stays at the smallest subnormal,
  // so each binade further down drops one more bit. Past 25 dropped bits the
  // result is 0 anyway (sig < 2^24), and the cap keeps the shifts defined.
  const int denormal_bits = std::max(kMinNormalExp - exp, 0);
  const int shift = std::min(23 - kMantBits + denormal_bits, 25);
  // Round to nearest even: adding half - 1, plus 1 when the kept LSB is odd,
  // carries into the kept bits exactly when the dropped part is above half,
  // or equal to half with an odd LSB.
  const uint32_t lsb = (sig >> shift) & 1;
  const uint32_t q = (sig + (1u << (shift - 1)) - 1 + lsb) >> shift;
  // For normals q still carries the implicit one at bit kMantBits, which
  // adds 1 to the exponent field, hence exp + bias - 1 = exp - kMinNormalExp.
  // Subnormals get exponent field 0 and q is the code itself.
  const int exp_field_minus_one = std::max(exp - kMinNormalExp, 0);
  return (static_cast<uint32_t>(exp_field_minus_one) << kMantBits) + q;
}

// Decodes a small binary float code with the given layout to float bits.
// Only for formats whose values are all normal floats (F16, FP8); BF16 is a
// plain shift. kFnNaN selects the E4M3FN convention (no infinities, only the
// all-ones code is NaN) over the IEEE one.
template <int kExpBits, int kMantBits, int kBias, bool kFnNaN>
constexpr float DecodeSmallFloat(uint32_t code) {
  static_assert(kBias < 127 - kMantBits, "subnormals must be float normals");
  constexpr int kWidth = 1 + kExpBits + kMantBits;
  constexpr uint32_t kExpMax = (1u << kExpBits) - 1;
  constexpr uint32_t kMantMask = (1u << kMantBits) - 1;
  const uint32_t sign = ((code >> (kWidth - 1)) & 1u) << 31;
  const uint32_t exp = (code >> kMantBits) & kExpMax;
  uint32_t mant = code & kMantMask;
  if constexpr (kFnNaN) {
    if (exp == kExpMax && mant == kMantMask) {
      return std::bit_cast<float>(sign | 0x7FC00000u);
    }
  } else if (exp == kExpMax) {
    // Inf or NaN. The payload goes to the top of float's mantissa, so the
    // quiet bit lands on float's quiet bit and is preserved.
    return std::bit_cast<float>(sign | 0x7F800000u |
                                (mant << (23 - kMantBits)));
  }
  int unbiased = static_cast<int>(exp) - kBias;
  if (exp == 0) {
    if (mant == 0) return std::bit_cast<float>(sign);
    // Subnormal mant * 2^(1 - bias - M): renormalize for float.
    const int lead = 31 - std::countl_zero(mant);
    const int shift = kMantBits - lead;
    mant = (mant << shift) & kMantMask;
    unbiased = 1 - kBias - shift;
  }
  return std::bit_cast<float>(sign |
                              (static_cast<uint32_t>(unbiased + 127) << 23) |
                              (mant << (23 - kMantBits)));
}

template <int kExpBits, int kMantBits, int kBias, bool kFnNaN, size_t kSize>
constexpr std::array<float, kSize> BuildDecodeTable() {
  std::array<float, kSize> table{};
  for (size_t i = 0; i < kSize; ++i) {
    table[i] = DecodeSmallFloat<kExpBits, kMantBits, kBias, kFnNaN>(
        static_cast<uint32_t>(i));
  }
  return table;
}

// Built at compile time: no static-initialization order issues and no
// first-use guard in the hot path.
constexpr std::array<float, 65536> kF16Table =
    BuildDecodeTable<5, 10, 15, false, 65536>();
constexpr std::array<float, 256> kE4M3Table =
    BuildDecodeTable<4, 3, 7, true, 256>();
constexpr std::array<float, 256> kE5M2Table =
    BuildDecodeTable<5, 2, 15, false, 256>();

inline const float* Fp8Table(Fp8Format fmt) {
  return fmt == Fp8Format::kE4M3 ? kE4M3Table.data() : kE5M2Table.data();
}

inline uint16_t EncodeF16(float x, int scale_exp) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t abs = bits & 0x7FFFFFFF;
  if (abs >= 0x7F800000) {
    if (abs == 0x7F800000) return sign | 0x7C00;
    // Quiet bit forced on: a NaN whose payload lived only in the dropped low
    // bits would otherwise become infinity.
    return sign | 0x7E00 | static_cast<uint16_t>((abs >> 13) & 0x3FF);
  }
  if (abs == 0) return sign;
  uint32_t mag = RoundMagnitude<10, 15>(abs, scale_exp);
  if (mag > 0x7BFF) mag = 0x7C00;  // IEEE overflow: infinity.
  return sign | static_cast<uint16_t>(mag);
}

inline uint16_t EncodeBf16(float x, int scale_exp) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t abs = bits & 0x7FFFFFFF;
  if (abs > 0x7F800000) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040);  // Quiet NaN.
  }
  if (scale_exp == 0) {
    // BF16 is float with the low 16 bits dropped, so adding just under half
    // of the dropped part (plus the kept LSB for ties-to-even) rounds
    // correctly; the carry handles subnormals, binade changes and overflow
    // to infinity alike.
    return static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
  }
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  if (abs == 0x7F800000) return sign | 0x7F80;
  if (abs == 0) return sign;
  uint32_t mag = RoundMagnitude<7, 127>(abs, scale_exp);
  if (mag > 0x7F7F) mag = 0x7F80;
  return sign | static_cast<uint16_t>(mag);
}

inline float DecodeBf16(uint16_t code) {
  return std::bit_cast<float>(static_cast<uint32_t>(code) << 16);
}

struct E4M3Traits {
  static constexpr int kMantBits = 3;
  static constexpr int kBias = 7;
  static constexpr uint32_t kMaxCode = 0x7E;
  static constexpr uint8_t kNaN = 0x7F;
  static constexpr uint8_t kNonSatOverflow = 0x7F;  // No inf: NaN.
};

struct E5M2Traits {
  static constexpr int kMantBits = 2;
  static constexpr int kBias = 15;
  static constexpr uint32_t kMaxCode = 0x7B;
  static constexpr uint8_t kNaN = 0x7E;             // Quiet NaN, as IEEE.
  static constexpr uint8_t kNonSatOverflow = 0x7C;  // Infinity.
};

template <typename Traits>
inline uint8_t EncodeFp8(float x, int scale_exp, Saturation sat) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  const uint32_t abs = bits & 0x7FFFFFFF;
  const uint8_t overflow = sat == Saturation::kSaturate
                               ? static_cast<uint8_t>(Traits::kMaxCode)
                               : Traits::kNonSatOverflow;
  if (abs >= 0x7F800000) {
    return sign | (abs == 0x7F800000 ? overflow : Traits::kNaN);
  }
  if (abs == 0) return sign;
  const uint32_t mag =
      RoundMagnitude<Traits::kMantBits, Traits::kBias>(abs, scale_exp);
  if (mag > Traits::kMaxCode) return sign | overflow;
  return sign | static_cast<uint8_t>(mag);
}

inline uint8_t EncodeFp8(float x, Fp8Format fmt, int scale_exp,
                         Saturation sat) {
  return fmt == Fp8Format::kE4M3 ? EncodeFp8<E4M3Traits>(x, scale_exp, sat)
                                 : EncodeFp8<E5M2Traits>(x, scale_exp, sat);
}

// Applies `fn(i)` producing a float to every output slot, then scales by
// 2^-scale_exp with a factor hoisted out of the loop when it is a normal
// float.
template <typename Fn>
inline void DecodeLoop(std::span<float> dst, int scale_exp, Fn fn) {
  const size_t n = dst.size();
  const int e = -ClampScale(scale_exp);
  if (e == 0) {
    for (size_t i = 0; i < n; ++i) dst[i] = fn(i);
  } else if (e >= -126 && e <= 127) {
    const float factor =
        std::bit_cast<float>(static_cast<uint32_t>(e + 127) << 23);
    for (size_t i = 0; i < n; ++i) dst[i] = fn(i) * factor;
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = std::ldexp(fn(i), e);
  }
}

inline void PutLe16(uint16_t v, uint8_t* dst) {
  dst[0] = static_cast<uint8_t>(v);
  dst[1] = static_cast<uint8_t>(v >> 8);
}

inline uint16_t GetLe16(const uint8_t* src) {
  return static_cast<uint16_t>(src[0] | (src[1] << 8));
}

inline void PutLe32(uint32_t v, uint8_t* dst) {
  dst[0] = static_cast<uint8_t>(v);
  dst[1] = static_cast<uint8_t>(v >> 8);
  dst[2] = static_cast<uint8_t>(v >> 16);
  dst[3] = static_cast<uint8_t>(v >> 24);
}

inline uint32_t GetLe32(const uint8_t* src) {
  return static_cast<uint32_t>(src[0]) | (static_cast<uint32_t>(src[1]) << 8) |
         (static_cast<uint32_t>(src[2]) << 16) |
         (static_cast<uint32_t>(src[3]) << 24);
}

// F16 codes of src[0, n) with scale_exp, written little-endian at dst.
// Unscaled (the only scale F16 tensors use) on a host with F16C, the
// hardware conversion does it eight at a time: IEEE round to nearest even,
// overflow to infinity, exact subnormals, NaNs quieted with their top
// payload bits kept, i.e. exactly EncodeF16(x, 0) for every float (the
// two were compared once on all 2^32 float bit patterns; numerics_test
// compares them on every sign and exponent around each rounding boundary).
void EncodeF16Scalar(const float* src, size_t n, int scale_exp, uint8_t* dst) {
  for (size_t i = 0; i < n; ++i) {
    PutLe16(EncodeF16(src[i], scale_exp), dst + 2 * i);
  }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target("avx,f16c"))) void EncodeF16Hardware(const float* src,
                                                           size_t n,
                                                           uint8_t* dst) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(src + i);
    const __m128i h =
        _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i), h);
  }
  EncodeF16Scalar(src + i, n - i, 0, dst + 2 * i);
}

bool HostHasF16c() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  }();
  return has;
}
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// FP8 codes to floats sixteen at a time, for hosts with AVX2 and F16C.
// Every E5M2 code is the top byte of the F16 code of the same value, and an
// E4M3 code's exponent and mantissa bits shifted into an F16 code give its
// value times 2^-8, so the F16 conversion instruction decodes them exactly;
// one multiply by 2^(8 - scale_exp) (E4M3) or 2^-scale_exp (E5M2), both
// normal floats (else the caller uses the table), then rounds once, exactly
// as the table path's value * 2^-scale_exp does. Groups holding a NaN code
// go through the table, which keeps NaN payloads exactly as it always has.
// Returns how many leading elements it decoded (a multiple of 16).
__attribute__((target("avx2,f16c"))) size_t Fp8DecodeHardware(
    const uint8_t* src, size_t n, Fp8Format fmt, float factor,
    const float* table, float table_factor, bool table_scaled, float* dst) {
  const bool e4m3 = fmt == Fp8Format::kE4M3;
  const __m256 f = _mm256_set1_ps(factor);
  const __m128i low7 = _mm_set1_epi8(0x7F);
  const __m128i nan_code = _mm_set1_epi8(e4m3 ? 0x7F : 0x7C);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i codes =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i magnitude = _mm_and_si128(codes, low7);
    // E4M3: NaN is S.1111.111; E5M2: NaN is above S.11111.00 (infinity).
    const __m128i nan = e4m3 ? _mm_cmpeq_epi8(magnitude, nan_code)
                             : _mm_cmpgt_epi8(magnitude, nan_code);
    if (_mm_movemask_epi8(nan) != 0) {
      for (size_t j = i; j < i + 16; ++j) {
        dst[j] = table_scaled ? table[src[j]] * table_factor : table[src[j]];
      }
      continue;
    }
    const __m256i wide = _mm256_cvtepu8_epi16(codes);
    __m256i half;
    if (e4m3) {
      const __m256i sign =
          _mm256_slli_epi16(_mm256_and_si256(wide, _mm256_set1_epi16(0x80)), 8);
      const __m256i bits =
          _mm256_slli_epi16(_mm256_and_si256(wide, _mm256_set1_epi16(0x7F)), 7);
      half = _mm256_or_si256(sign, bits);
    } else {
      half = _mm256_slli_epi16(wide, 8);
    }
    const __m256 lo = _mm256_cvtph_ps(_mm256_castsi256_si128(half));
    const __m256 hi = _mm256_cvtph_ps(_mm256_extracti128_si256(half, 1));
    _mm256_storeu_ps(dst + i, _mm256_mul_ps(lo, f));
    _mm256_storeu_ps(dst + i + 8, _mm256_mul_ps(hi, f));
  }
  return i;
}

// Whether any of eight float bit patterns (their absolute values) is a
// float subnormal, an infinity or a NaN: RoundMagnitude normalizes the
// first by counting zeros, EncodeFp8 sends the others to fixed codes.
TILEC_AVX2_INLINE bool AnyNotNormalOrZero(__m256i abs) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i subnormal =
      _mm256_andnot_si256(_mm256_cmpeq_epi32(abs, zero),
                          _mm256_cmpeq_epi32(_mm256_srli_epi32(abs, 23), zero));
  // abs >= infinity, as signed lanes (abs has no sign bit).
  const __m256i special = _mm256_or_si256(
      subnormal, _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7F7FFFFF)));
  return !_mm256_testz_si256(special, special);
}

// RoundMagnitude<kMantBits, kBias> of eight normal floats' absolute bits,
// operation for operation.
template <int kMantBits, int kBias>
TILEC_AVX2_INLINE __m256i RoundMagnitude8(__m256i abs, int scale_exp) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i min_normal = _mm256_set1_epi32(1 - kBias);
  const __m256i sig =
      _mm256_or_si256(_mm256_and_si256(abs, _mm256_set1_epi32(0x7FFFFF)),
                      _mm256_set1_epi32(0x800000));
  const __m256i exp =
      _mm256_add_epi32(_mm256_srli_epi32(abs, 23),
                       _mm256_set1_epi32(ClampScale(scale_exp) - 127));
  const __m256i denormal_bits =
      _mm256_max_epi32(_mm256_sub_epi32(min_normal, exp), zero);
  const __m256i shift = _mm256_min_epi32(
      _mm256_add_epi32(_mm256_set1_epi32(23 - kMantBits), denormal_bits),
      _mm256_set1_epi32(25));
  const __m256i lsb = _mm256_and_si256(_mm256_srlv_epi32(sig, shift), one);
  const __m256i half = _mm256_sllv_epi32(one, _mm256_sub_epi32(shift, one));
  const __m256i q = _mm256_srlv_epi32(
      _mm256_add_epi32(_mm256_sub_epi32(_mm256_add_epi32(sig, half), one), lsb),
      shift);
  const __m256i exp_field_minus_one =
      _mm256_max_epi32(_mm256_sub_epi32(exp, min_normal), zero);
  return _mm256_add_epi32(_mm256_slli_epi32(exp_field_minus_one, kMantBits), q);
}

// The low byte of each of eight 32-bit lanes, in order, at dst[0, 8).
TILEC_AVX2_INLINE void StoreLowBytes(__m256i lanes, uint8_t* dst) {
  const __m256i low_bytes = _mm256_setr_epi8(
      0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,  //
      0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i packed = _mm256_shuffle_epi8(lanes, low_bytes);
  const uint32_t lo =
      static_cast<uint32_t>(_mm_cvtsi128_si32(_mm256_castsi256_si128(packed)));
  const uint32_t hi = static_cast<uint32_t>(
      _mm_cvtsi128_si32(_mm256_extracti128_si256(packed, 1)));
  std::memcpy(dst, &lo, 4);
  std::memcpy(dst + 4, &hi, 4);
}

// FP8 codes of eight floats at a time for hosts with AVX2: EncodeFp8 in
// integer lanes, the same operations on the same bits, so every code is
// EncodeFp8's. Groups holding a float subnormal, an infinity or a NaN go
// through EncodeFp8. Returns how many leading elements it encoded (a
// multiple of 8).
template <typename Traits>
__attribute__((target("avx2"))) size_t Fp8EncodeHardware(
    const float* src, size_t n, int scale_exp, Saturation sat, uint8_t* dst) {
  const __m256i overflow =
      _mm256_set1_epi32(sat == Saturation::kSaturate ? Traits::kMaxCode
                                                     : Traits::kNonSatOverflow);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i bits =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i abs = _mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFFFF));
    if (AnyNotNormalOrZero(abs)) {
      for (size_t j = i; j < i + 8; ++j) {
        dst[j] = EncodeFp8<Traits>(src[j], scale_exp, sat);
      }
      continue;
    }
    const __m256i mag =
        RoundMagnitude8<Traits::kMantBits, Traits::kBias>(abs, scale_exp);
    // mag > kMaxCode (unsigned; mag is below 2^31 here) overflows; zeros
    // keep only their sign.
    __m256i code = _mm256_blendv_epi8(
        mag, overflow,
        _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(Traits::kMaxCode)));
    code = _mm256_andnot_si256(_mm256_cmpeq_epi32(abs, _mm256_setzero_si256()),
                               code);
    code = _mm256_or_si256(code, _mm256_and_si256(_mm256_srli_epi32(bits, 24),
                                                  _mm256_set1_epi32(0x80)));
    StoreLowBytes(code, dst + i);
  }
  return i;
}

// F16 codes (little-endian bytes) to floats eight at a time through F16C:
// exact, like the table, for every code but the NaNs, whose groups use the
// table (the instruction would quiet signalling NaNs). With `scaled`, one
// multiply by the normal float `factor` = 2^-scale_exp, as DecodeLoop does.
// Returns how many leading elements it decoded (a multiple of 8).
__attribute__((target("avx2,f16c"))) size_t F16DecodeHardware(
    const uint8_t* src, size_t n, bool scaled, float factor, float* dst) {
  const __m256 f = _mm256_set1_ps(factor);
  const __m128i magnitude_mask = _mm_set1_epi16(0x7FFF);
  const __m128i infinity = _mm_set1_epi16(0x7C00);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i codes =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
    const __m128i nan =
        _mm_cmpgt_epi16(_mm_and_si128(codes, magnitude_mask), infinity);
    if (_mm_movemask_epi8(nan) != 0) {
      for (size_t j = i; j < i + 8; ++j) {
        const float v = kF16Table[GetLe16(src + 2 * j)];
        dst[j] = scaled ? v * factor : v;
      }
      continue;
    }
    __m256 v = _mm256_cvtph_ps(codes);
    if (scaled) v = _mm256_mul_ps(v, f);
    _mm256_storeu_ps(dst + i, v);
  }
  return i;
}

bool HostHasAvx2F16c() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  }();
  return has;
}
#endif

// F16 codes (little-endian bytes) at src to dst.size() floats times
// 2^-scale_exp.
void DecodeF16Bulk(const uint8_t* src, int scale_exp, std::span<float> dst) {
  size_t done = 0;
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  const int e = -ClampScale(scale_exp);
  if (dst.size() >= 8 && e >= -126 && e <= 127 && HostHasAvx2F16c()) {
    done = F16DecodeHardware(
        src, dst.size(), e != 0,
        std::bit_cast<float>(static_cast<uint32_t>(e + 127) << 23), dst.data());
  }
#endif
  DecodeLoop(dst.subspan(done), scale_exp, [&](size_t i) {
    return kF16Table[GetLe16(src + 2 * (done + i))];
  });
}

void EncodeF16Bulk(const float* src, size_t n, int scale_exp, uint8_t* dst) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  if (scale_exp == 0 && HostHasF16c()) {
    EncodeF16Hardware(src, n, dst);
    return;
  }
#endif
  EncodeF16Scalar(src, n, scale_exp, dst);
}

}  // namespace

// --- F16 / BF16 --------------------------------------------------------------

uint16_t F16Encode(float x, int scale_exp) { return EncodeF16(x, scale_exp); }

float F16Decode(uint16_t code, int scale_exp) {
  return ScaleByPow2(kF16Table[code], -ClampScale(scale_exp));
}

uint16_t Bf16Encode(float x, int scale_exp) { return EncodeBf16(x, scale_exp); }

float Bf16Decode(uint16_t code, int scale_exp) {
  return ScaleByPow2(DecodeBf16(code), -ClampScale(scale_exp));
}

float RoundToF16(float x) { return kF16Table[EncodeF16(x, 0)]; }

float RoundToBf16(float x) { return DecodeBf16(EncodeBf16(x, 0)); }

// --- FP8 ---------------------------------------------------------------------

float Fp8MaxFinite(Fp8Format fmt) {
  return fmt == Fp8Format::kE4M3 ? 448.0f : 57344.0f;
}

uint8_t Fp8Encode(float x, Fp8Format fmt, int scale_exp, Saturation sat) {
  return EncodeFp8(x, fmt, scale_exp, sat);
}

float Fp8Decode(uint8_t code, Fp8Format fmt, int scale_exp) {
  return ScaleByPow2(Fp8Table(fmt)[code], -ClampScale(scale_exp));
}

float RoundToFp8(float x, Fp8Format fmt, int scale_exp, Saturation sat) {
  return Fp8Decode(EncodeFp8(x, fmt, scale_exp, sat), fmt, scale_exp);
}

int Fp8ScaleExpForAmax(float amax, Fp8Format fmt) {
  const float a = std::fabs(amax);
  if (!(a > 0.0f) || !std::isfinite(a)) return 0;
  // With a = fa * 2^ka and max = fm * 2^km (fractions in [0.5, 1)),
  // a * 2^e <= max iff fa * 2^(ka + e) <= fm * 2^km: e = km - ka works when
  // fa <= fm, otherwise one less.
  int ka = 0;
  int km = 0;
  const float fa = std::frexp(a, &ka);
  const float fm = std::frexp(Fp8MaxFinite(fmt), &km);
  return fa <= fm ? km - ka : km - ka - 1;
}

int Fp8ScaleExpForTensor(std::span<const float> values, Fp8Format fmt) {
  // Non-negative floats order like their bit patterns, and finite ones are
  // exactly those below the infinity pattern.
  uint32_t amax_bits = 0;
  for (const float v : values) {
    const uint32_t abs = std::bit_cast<uint32_t>(v) & 0x7FFFFFFF;
    if (abs < 0x7F800000 && abs > amax_bits) amax_bits = abs;
  }
  return Fp8ScaleExpForAmax(std::bit_cast<float>(amax_bits), fmt);
}

// --- Bulk --------------------------------------------------------------------

void F16EncodeArray(std::span<const float> src, std::span<uint16_t> dst,
                    int scale_exp) {
  CHECK_EQ(src.size(), dst.size());
  // Native order: the scalar path writes little-endian bytes, so encode
  // through it only where that is the native order.
  if constexpr (std::endian::native == std::endian::little) {
    EncodeF16Bulk(src.data(), src.size(), scale_exp,
                  reinterpret_cast<uint8_t*>(dst.data()));
  } else {
    for (size_t i = 0; i < src.size(); ++i) {
      dst[i] = EncodeF16(src[i], scale_exp);
    }
  }
}

void F16DecodeArray(std::span<const uint16_t> src, std::span<float> dst,
                    int scale_exp) {
  CHECK_EQ(src.size(), dst.size());
  if constexpr (std::endian::native == std::endian::little) {
    DecodeF16Bulk(reinterpret_cast<const uint8_t*>(src.data()), scale_exp, dst);
  } else {
    DecodeLoop(dst, scale_exp, [&](size_t i) { return kF16Table[src[i]]; });
  }
}

void Bf16EncodeArray(std::span<const float> src, std::span<uint16_t> dst,
                     int scale_exp) {
  CHECK_EQ(src.size(), dst.size());
  for (size_t i = 0; i < src.size(); ++i) {
    dst[i] = EncodeBf16(src[i], scale_exp);
  }
}

void Bf16DecodeArray(std::span<const uint16_t> src, std::span<float> dst,
                     int scale_exp) {
  CHECK_EQ(src.size(), dst.size());
  DecodeLoop(dst, scale_exp, [&](size_t i) { return DecodeBf16(src[i]); });
}

void Fp8EncodeArray(std::span<const float> src, std::span<uint8_t> dst,
                    Fp8Format fmt, int scale_exp, Saturation sat) {
  CHECK_EQ(src.size(), dst.size());
  // Format dispatch hoisted out of the loop.
  const auto encode = [&]<typename Traits>(Traits) {
    size_t done = 0;
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    if (src.size() >= 8 && HostHasAvx2F16c()) {
      done = Fp8EncodeHardware<Traits>(src.data(), src.size(), scale_exp, sat,
                                       dst.data());
    }
#endif
    for (size_t i = done; i < src.size(); ++i) {
      dst[i] = EncodeFp8<Traits>(src[i], scale_exp, sat);
    }
  };
  if (fmt == Fp8Format::kE4M3) {
    encode(E4M3Traits{});
  } else {
    encode(E5M2Traits{});
  }
}

void Fp8DecodeArray(std::span<const uint8_t> src, std::span<float> dst,
                    Fp8Format fmt, int scale_exp) {
  CHECK_EQ(src.size(), dst.size());
  const float* table = Fp8Table(fmt);
  size_t done = 0;
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  // The factor from F16-decoded values to value * 2^-scale_exp, and the
  // table path's own factor (DecodeLoop's), both normal floats here.
  const int e = -ClampScale(scale_exp);
  const int hw_e = fmt == Fp8Format::kE4M3 ? e + 8 : e;
  if (src.size() >= 16 && e >= -126 && e <= 127 && hw_e >= -126 &&
      hw_e <= 127 && HostHasAvx2F16c()) {
    const auto pow2 = [](int x) {
      return std::bit_cast<float>(static_cast<uint32_t>(x + 127) << 23);
    };
    done = Fp8DecodeHardware(src.data(), src.size(), fmt, pow2(hw_e), table,
                             pow2(e), e != 0, dst.data());
  }
#endif
  DecodeLoop(dst.subspan(done), scale_exp,
             [&](size_t i) { return table[src[done + i]]; });
}

// --- DType -------------------------------------------------------------------

int DTypeBytes(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kFp8E4M3:
    case DType::kFp8E5M2:
      return 1;
  }
  LOG(FATAL) << "invalid DType " << static_cast<int>(dtype);
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kFp8E4M3:
      return "fp8e4m3";
    case DType::kFp8E5M2:
      return "fp8e5m2";
  }
  LOG(FATAL) << "invalid DType " << static_cast<int>(dtype);
}

void StoreAs(DType dtype, float value, int scale_exp, uint8_t* dst) {
  switch (dtype) {
    case DType::kF32:
      PutLe32(
          std::bit_cast<uint32_t>(ScaleByPow2(value, ClampScale(scale_exp))),
          dst);
      return;
    case DType::kF16:
      PutLe16(EncodeF16(value, scale_exp), dst);
      return;
    case DType::kBF16:
      PutLe16(EncodeBf16(value, scale_exp), dst);
      return;
    case DType::kFp8E4M3:
      dst[0] = EncodeFp8<E4M3Traits>(value, scale_exp, Saturation::kSaturate);
      return;
    case DType::kFp8E5M2:
      dst[0] = EncodeFp8<E5M2Traits>(value, scale_exp, Saturation::kSaturate);
      return;
  }
  LOG(FATAL) << "invalid DType " << static_cast<int>(dtype);
}

float LoadAs(DType dtype, const uint8_t* src, int scale_exp) {
  const int e = -ClampScale(scale_exp);
  switch (dtype) {
    case DType::kF32:
      return ScaleByPow2(std::bit_cast<float>(GetLe32(src)), e);
    case DType::kF16:
      return ScaleByPow2(kF16Table[GetLe16(src)], e);
    case DType::kBF16:
      return ScaleByPow2(DecodeBf16(GetLe16(src)), e);
    case DType::kFp8E4M3:
      return ScaleByPow2(kE4M3Table[src[0]], e);
    case DType::kFp8E5M2:
      return ScaleByPow2(kE5M2Table[src[0]], e);
  }
  LOG(FATAL) << "invalid DType " << static_cast<int>(dtype);
}

void StoreArrayAs(DType dtype, std::span<const float> src, int scale_exp,
                  std::span<uint8_t> dst) {
  const size_t width = static_cast<size_t>(DTypeBytes(dtype));
  CHECK_EQ(dst.size(), src.size() * width);
  const size_t n = src.size();
  uint8_t* out = dst.data();
  switch (dtype) {
    case DType::kF32: {
      const int e = ClampScale(scale_exp);
      for (size_t i = 0; i < n; ++i) {
        PutLe32(std::bit_cast<uint32_t>(ScaleByPow2(src[i], e)), out + 4 * i);
      }
      return;
    }
    case DType::kF16:
      EncodeF16Bulk(src.data(), n, scale_exp, out);
      return;
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        PutLe16(EncodeBf16(src[i], scale_exp), out + 2 * i);
      }
      return;
    case DType::kFp8E4M3:
    case DType::kFp8E5M2:
      Fp8EncodeArray(
          src, dst,
          dtype == DType::kFp8E4M3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2,
          scale_exp, Saturation::kSaturate);
      return;
  }
  LOG(FATAL) << "invalid DType " << static_cast<int>(dtype);
}

void LoadArrayAs(DType dtype, std::span<const uint8_t> src, int scale_exp,
                 std::span<float> dst) {
  const size_t width = static_cast<size_t>(DTypeBytes(dtype));
  CHECK_EQ(src.size(), dst.size() * width);
  const uint8_t* in = src.data();
  switch (dtype) {
    case DType::kF32:
      DecodeLoop(dst, scale_exp, [&](size_t i) {
        return std::bit_cast<float>(GetLe32(in + 4 * i));
      });
      return;
    case DType::kF16:
      DecodeF16Bulk(in, scale_exp, dst);
      return;
    case DType::kBF16:
      DecodeLoop(dst, scale_exp,
                 [&](size_t i) { return DecodeBf16(GetLe16(in + 2 * i)); });
      return;
    case DType::kFp8E4M3:
    case DType::kFp8E5M2:
      Fp8DecodeArray(
          src, dst,
          dtype == DType::kFp8E4M3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2,
          scale_exp);
      return;
  }
  LOG(FATAL) << "invalid DType " << static_cast<int>(dtype);
}

}  // namespace tilec::kernels
