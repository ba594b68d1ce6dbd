#include "kernels/numerics.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tilec::kernels {
namespace {

// ---------------------------------------------------------------------------
// Independent reference. Everything here works from the format definitions
// (sign/exponent/mantissa fields, std::ldexp, double arithmetic and a sorted
// table of representable values), never from the library's bit tricks.

struct Layout {
  const char* name;
  int exp_bits;
  int mant_bits;
  int bias;
  bool fn_nan;  // E4M3FN: no infinities, only all-ones is NaN.
  int Width() const { return 1 + exp_bits + mant_bits; }
};

constexpr Layout kF16Layout{"f16", 5, 10, 15, false};
constexpr Layout kBf16Layout{"bf16", 8, 7, 127, false};
constexpr Layout kE4M3Layout{"e4m3", 4, 3, 7, true};
constexpr Layout kE5M2Layout{"e5m2", 5, 2, 15, false};

double RefValue(uint32_t code, const Layout& l) {
  const uint32_t s = (code >> (l.Width() - 1)) & 1;
  const uint32_t e = (code >> l.mant_bits) & ((1u << l.exp_bits) - 1);
  const uint32_t m = code & ((1u << l.mant_bits) - 1);
  const uint32_t e_max = (1u << l.exp_bits) - 1;
  const uint32_t m_max = (1u << l.mant_bits) - 1;
  double mag;
  if (!l.fn_nan && e == e_max) {
    mag = m == 0 ? std::numeric_limits<double>::infinity()
                 : std::numeric_limits<double>::quiet_NaN();
  } else if (l.fn_nan && e == e_max && m == m_max) {
    mag = std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    mag = std::ldexp(static_cast<double>(m), 1 - l.bias - l.mant_bits);
  } else {
    mag = std::ldexp(static_cast<double>(m + (1u << l.mant_bits)),
                     static_cast<int>(e) - l.bias - l.mant_bits);
  }
  return s ? -mag : mag;
}

// Correct rounding of a double to float, with overflow spelled out (a
// double->float conversion of an out-of-range value is undefined).
float RefToFloat(double d) {
  // FLT_MAX plus half an ulp; at or beyond it RNE gives infinity (the tie
  // goes away from FLT_MAX's odd mantissa).
  const double kInfThreshold = std::ldexp(1.0, 128) - std::ldexp(1.0, 103);
  if (std::fabs(d) >= kInfThreshold) {
    return std::copysign(std::numeric_limits<float>::infinity(),
                         static_cast<float>(std::signbit(d) ? -1 : 1));
  }
  return static_cast<float>(d);
}

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }
float FromBits(uint32_t b) { return std::bit_cast<float>(b); }

// Slow, obviously-correct rounding: the positive finite values sorted, plus
// one "virtual" value one ulp above the max (what the next code would be if
// the exponent range did not end). Rounding to nearest picks the closer
// neighbour; a tie goes to the even code (mantissa LSB 0, which across a
// binade boundary is still the code LSB). Landing on the virtual value means
// overflow.
class RefRounder {
 public:
  explicit RefRounder(const Layout& l) {
    for (uint32_t code = 0; code < (1u << (l.Width() - 1)); ++code) {
      const double v = RefValue(code, l);
      if (std::isfinite(v)) entries_.push_back({v, code});
    }
    std::sort(entries_.begin(), entries_.end(),
              [](const Entry& a, const Entry& b) { return a.value < b.value; });
    const Entry last = entries_.back();
    const Entry prev = entries_[entries_.size() - 2];
    max_code_ = last.code;
    entries_.push_back({last.value + (last.value - prev.value), last.code + 1});
  }

  struct Result {
    uint32_t code;
    bool overflow;
  };

  // y: finite, >= 0.
  Result Round(double y) const {
    auto it =
        std::upper_bound(entries_.begin(), entries_.end(), y,
                         [](double v, const Entry& e) { return v < e.value; });
    if (it == entries_.end()) return {0, true};
    const Entry& lo = *(it - 1);  // entries_[0] is +0 <= y.
    const Entry& hi = *it;
    const double mid = (lo.value + hi.value) / 2;  // Exact: one more bit.
    const Entry* pick;
    if (lo.value == y || y < mid) {
      pick = &lo;
    } else if (y > mid) {
      pick = &hi;
    } else {
      pick = (lo.code & 1) == 0 ? &lo : &hi;
    }
    return {pick->code, pick->code > max_code_};
  }

  // Adjacent pairs including the (max, virtual) one.
  size_t size() const { return entries_.size(); }
  double value(size_t i) const { return entries_[i].value; }

 private:
  struct Entry {
    double value;
    uint32_t code;
  };
  std::vector<Entry> entries_;
  uint32_t max_code_ = 0;
};

const RefRounder& Rounder(const Layout& l) {
  static const RefRounder* f16 = new RefRounder(kF16Layout);
  static const RefRounder* bf16 = new RefRounder(kBf16Layout);
  static const RefRounder* e4m3 = new RefRounder(kE4M3Layout);
  static const RefRounder* e5m2 = new RefRounder(kE5M2Layout);
  if (&l == &kF16Layout) return *f16;
  if (&l == &kBf16Layout) return *bf16;
  if (&l == &kE4M3Layout) return *e4m3;
  return *e5m2;
}

// One encoder under test together with what its reference result is.
struct EncodeCase {
  std::string name;
  const Layout* layout;
  uint32_t overflow_mag;  // Magnitude code produced on overflow / for inf.
  std::function<uint32_t(float, int)> encode;
};

std::vector<EncodeCase> AllCases() {
  return {
      {"f16", &kF16Layout, 0x7C00,
       [](float x, int s) { return uint32_t{F16Encode(x, s)}; }},
      {"bf16", &kBf16Layout, 0x7F80,
       [](float x, int s) { return uint32_t{Bf16Encode(x, s)}; }},
      {"e4m3/sat", &kE4M3Layout, 0x7E,
       [](float x, int s) {
         return uint32_t{
             Fp8Encode(x, Fp8Format::kE4M3, s, Saturation::kSaturate)};
       }},
      {"e4m3/nonsat", &kE4M3Layout, 0x7F,
       [](float x, int s) {
         return uint32_t{
             Fp8Encode(x, Fp8Format::kE4M3, s, Saturation::kNonSaturating)};
       }},
      {"e5m2/sat", &kE5M2Layout, 0x7B,
       [](float x, int s) {
         return uint32_t{
             Fp8Encode(x, Fp8Format::kE5M2, s, Saturation::kSaturate)};
       }},
      {"e5m2/nonsat", &kE5M2Layout, 0x7C,
       [](float x, int s) {
         return uint32_t{
             Fp8Encode(x, Fp8Format::kE5M2, s, Saturation::kNonSaturating)};
       }},
  };
}

// Reference code for a non-NaN float x scaled by 2^s (exact in double).
uint32_t ExpectedCode(const EncodeCase& c, float x, int s) {
  const uint32_t sign = std::signbit(x) ? 1u << (c.layout->Width() - 1) : 0;
  if (std::isinf(x)) return sign | c.overflow_mag;
  const double y = std::ldexp(std::fabs(static_cast<double>(x)), s);
  const RefRounder::Result r = Rounder(*c.layout).Round(y);
  return sign | (r.overflow ? c.overflow_mag : r.code);
}

// Checks one value and reports only the first few mismatches per case so a
// systematic bug does not flood the log.
class Checker {
 public:
  explicit Checker(const EncodeCase& c) : c_(c) {}
  ~Checker() {
    EXPECT_EQ(failures_, 0) << c_.name << ": " << failures_ << " of "
                            << checked_ << " values misrounded";
  }
  void Check(float x, int s) {
    ++checked_;
    const uint32_t got = c_.encode(x, s);
    const uint32_t want = ExpectedCode(c_, x, s);
    if (got != want && ++failures_ <= 5) {
      ADD_FAILURE() << c_.name << " x=" << x << " (bits 0x" << std::hex
                    << Bits(x) << ") scale=" << std::dec << s << " got 0x"
                    << std::hex << got << " want 0x" << want;
    }
  }
  // Both signs.
  void CheckPm(float x, int s) {
    Check(x, s);
    Check(-x, s);
  }
  int64_t checked() const { return checked_; }

 private:
  const EncodeCase& c_;
  int64_t checked_ = 0;
  int64_t failures_ = 0;
};

// Calls fn(float) for about `count` non-NaN floats whose bit patterns lie in
// [lo, hi], evenly strided. The stride is odd so every low-bit pattern
// (i.e. every rounding situation) shows up.
template <typename Fn>
void SweepBits(uint32_t lo, uint32_t hi, uint64_t count, Fn fn) {
  const uint64_t span = uint64_t{hi} - lo;
  const uint64_t stride = std::max<uint64_t>(1, span / count) | 1;
  for (uint64_t b = lo; b <= hi; b += stride) {
    const float x = FromBits(static_cast<uint32_t>(b));
    if (!std::isnan(x)) fn(x);
  }
}

// Sweeps, for one case and scale, the float range where the format does
// something interesting: from well below half the smallest subnormal to well
// past the overflow threshold (both scaled by 2^-s, clamped to float range).
void SweepInterestingRange(const EncodeCase& c, int s, uint64_t count) {
  const RefRounder& r = Rounder(*c.layout);
  const double lo = std::ldexp(r.value(1) / 8, -s);
  const double hi = std::ldexp(r.value(r.size() - 1) * 4, -s);
  const uint32_t lo_bits =
      lo < std::numeric_limits<float>::denorm_min() ? 1 : Bits(RefToFloat(lo));
  const uint32_t hi_bits = hi > std::numeric_limits<float>::max()
                               ? Bits(std::numeric_limits<float>::max())
                               : Bits(RefToFloat(hi));
  Checker checker(c);
  SweepBits(lo_bits, hi_bits, count, [&](float x) { checker.CheckPm(x, s); });
}

// ---------------------------------------------------------------------------
// Decoding: every code, against the field-wise definition.

void CheckAllDecodes(const Layout& l, const std::function<float(uint32_t)>& dec,
                     int scale_exp) {
  int failures = 0;
  for (uint32_t code = 0; code < (1u << l.Width()); ++code) {
    const double want = RefValue(code, l);
    const float got = dec(code);
    if (std::isnan(want)) {
      if (!std::isnan(got) ||
          std::signbit(got) != std::signbit(static_cast<float>(want))) {
        if (++failures <= 5) ADD_FAILURE() << l.name << " code " << code;
      }
      continue;
    }
    const float want_f = RefToFloat(std::ldexp(want, -scale_exp));
    if (Bits(got) != Bits(want_f) && ++failures <= 5) {
      ADD_FAILURE() << l.name << " code 0x" << std::hex << code << std::dec
                    << " scale " << scale_exp << " got " << got << " want "
                    << want_f;
    }
  }
  EXPECT_EQ(failures, 0) << l.name;
}

TEST(DecodeTest, AllF16Codes) {
  for (int s : {0, -3, 7, 130, -130}) {
    CheckAllDecodes(
        kF16Layout,
        [s](uint32_t c) { return F16Decode(static_cast<uint16_t>(c), s); }, s);
  }
}

TEST(DecodeTest, AllBf16Codes) {
  for (int s : {0, -3, 7, 40, -40}) {
    CheckAllDecodes(
        kBf16Layout,
        [s](uint32_t c) { return Bf16Decode(static_cast<uint16_t>(c), s); }, s);
  }
}

TEST(DecodeTest, AllFp8Codes) {
  for (int s : {0, -4, 9, 145, -120}) {
    CheckAllDecodes(
        kE4M3Layout,
        [s](uint32_t c) {
          return Fp8Decode(static_cast<uint8_t>(c), Fp8Format::kE4M3, s);
        },
        s);
    CheckAllDecodes(
        kE5M2Layout,
        [s](uint32_t c) {
          return Fp8Decode(static_cast<uint8_t>(c), Fp8Format::kE5M2, s);
        },
        s);
  }
}

TEST(DecodeTest, KnownValues) {
  EXPECT_EQ(F16Decode(0x3C00), 1.0f);
  EXPECT_EQ(F16Decode(0x7BFF), 65504.0f);
  EXPECT_EQ(F16Decode(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(Bf16Decode(0x3F80), 1.0f);
  EXPECT_EQ(Fp8Decode(0x7E, Fp8Format::kE4M3), 448.0f);
  EXPECT_EQ(Fp8Decode(0x01, Fp8Format::kE4M3), std::ldexp(1.0f, -9));
  EXPECT_EQ(Fp8Decode(0x78, Fp8Format::kE4M3), 256.0f);  // Exp field 15 is
                                                         // finite in E4M3FN.
  EXPECT_TRUE(std::isnan(Fp8Decode(0x7F, Fp8Format::kE4M3)));
  EXPECT_TRUE(std::isnan(Fp8Decode(0xFF, Fp8Format::kE4M3)));
  EXPECT_EQ(Fp8Decode(0x7B, Fp8Format::kE5M2), 57344.0f);
  EXPECT_EQ(Fp8Decode(0x7C, Fp8Format::kE5M2),
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(Fp8Decode(0x01, Fp8Format::kE5M2), std::ldexp(1.0f, -16));
  EXPECT_EQ(Fp8Decode(0x38, Fp8Format::kE4M3, 3), 0.125f);
  EXPECT_TRUE(std::signbit(Fp8Decode(0x80, Fp8Format::kE4M3)));
  EXPECT_EQ(Fp8MaxFinite(Fp8Format::kE4M3), 448.0f);
  EXPECT_EQ(Fp8MaxFinite(Fp8Format::kE5M2), 57344.0f);
}

// ---------------------------------------------------------------------------
// Round trips: code -> float -> code is the identity off NaN.

TEST(RoundTripTest, F16AndBf16AllCodes) {
  for (uint32_t c = 0; c < 65536; ++c) {
    const uint16_t code = static_cast<uint16_t>(c);
    if (!std::isnan(RefValue(c, kF16Layout))) {
      ASSERT_EQ(F16Encode(F16Decode(code)), code) << c;
      ASSERT_EQ(F16Encode(F16Decode(code, 5), 5), code) << c;
    }
    if (!std::isnan(RefValue(c, kBf16Layout))) {
      ASSERT_EQ(Bf16Encode(Bf16Decode(code)), code) << c;
      // BF16 spans all of float's range, so only codes whose scaled value
      // is still an exact float can come back.
      const float scaled = Bf16Decode(code, -9);
      if (static_cast<double>(scaled) ==
          std::ldexp(RefValue(c, kBf16Layout), 9)) {
        ASSERT_EQ(Bf16Encode(scaled, -9), code) << c;
      }
    }
  }
}

TEST(RoundTripTest, Fp8AllCodes) {
  for (uint32_t c = 0; c < 256; ++c) {
    const uint8_t code = static_cast<uint8_t>(c);
    for (Saturation sat : {Saturation::kSaturate, Saturation::kNonSaturating}) {
      for (int s : {0, 6, -11}) {
        const double v = RefValue(c, kE4M3Layout);
        if (!std::isnan(v)) {
          EXPECT_EQ(Fp8Encode(Fp8Decode(code, Fp8Format::kE4M3, s),
                              Fp8Format::kE4M3, s, sat),
                    code)
              << c;
        }
        const double w = RefValue(c, kE5M2Layout);
        // Saturating mode deliberately maps infinities to +-max.
        if (!std::isnan(w) &&
            (!std::isinf(w) || sat == Saturation::kNonSaturating)) {
          EXPECT_EQ(Fp8Encode(Fp8Decode(code, Fp8Format::kE5M2, s),
                              Fp8Format::kE5M2, s, sat),
                    code)
              << c;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Encoding against the reference.

// Every 1023rd float bit pattern over the whole 32-bit space (~4M values):
// zeros, float subnormals, huge values, infinities.
TEST(EncodeTest, FullFloatRangeSweep) {
  for (const EncodeCase& c : AllCases()) {
    Checker checker(c);
    SweepBits(0, 0xFFFFFFFF, uint64_t{1} << 22,
              [&](float x) { checker.Check(x, 0); });
  }
}

// Dense sweep where rounding is non-trivial for each format.
TEST(EncodeTest, InterestingRangeSweep) {
  for (const EncodeCase& c : AllCases()) {
    SweepInterestingRange(c, 0, uint64_t{1} << 21);
  }
}

// Exact midpoints between adjacent representable values (ties must go to the
// even code), the floats right next to them, and the representable values
// and their neighbours, including the max/overflow boundary.
TEST(EncodeTest, MidpointsAndNeighbours) {
  for (const EncodeCase& c : AllCases()) {
    const RefRounder& r = Rounder(*c.layout);
    Checker checker(c);
    for (int s : {0, -9, 3, 17}) {
      for (size_t i = 0; i + 1 < r.size(); ++i) {
        const double lo = std::ldexp(r.value(i), -s);
        const double mid = std::ldexp((r.value(i) + r.value(i + 1)) / 2, -s);
        for (double d : {lo, mid}) {
          const float f = RefToFloat(d);
          if (static_cast<double>(f) != d) {
            // Only possible when scaled out of float range.
            ASSERT_NE(s, 0) << c.name << " midpoint not a float: " << d;
            continue;
          }
          checker.CheckPm(f, s);
          checker.CheckPm(std::nextafter(f, 0.0f), s);
          checker.CheckPm(std::nextafter(f, HUGE_VALF), s);
        }
      }
    }
    EXPECT_GT(checker.checked(), 0);
  }
}

TEST(EncodeTest, SubnormalRanges) {
  struct Range {
    const char* name;
    double lo;
    double hi;
  };
  // From a quarter of the smallest subnormal up to the smallest normal.
  const Range kRanges[] = {
      {"f16", std::ldexp(1.0, -26), std::ldexp(1.0, -14)},
      {"bf16", 0.0, std::ldexp(1.0, -126)},
      {"e4m3", std::ldexp(1.0, -11), std::ldexp(1.0, -6)},
      {"e5m2", std::ldexp(1.0, -18), std::ldexp(1.0, -14)},
  };
  for (const EncodeCase& c : AllCases()) {
    for (const Range& range : kRanges) {
      if (c.name.rfind(range.name, 0) != 0) continue;
      Checker checker(c);
      SweepBits(Bits(static_cast<float>(range.lo)),
                Bits(static_cast<float>(range.hi)), uint64_t{1} << 19,
                [&](float x) { checker.CheckPm(x, 0); });
    }
  }
}

// Float subnormal inputs scaled up into the formats' ranges exercise the
// normalization of subnormal inputs.
TEST(EncodeTest, ScaledFloatSubnormals) {
  for (const EncodeCase& c : AllCases()) {
    const int s = c.layout == &kBf16Layout ? 10 : 140;
    Checker checker(c);
    SweepBits(1, 0x007FFFFF, uint64_t{1} << 18,
              [&](float x) { checker.CheckPm(x, s); });
  }
}

TEST(EncodeTest, ScaledSweeps) {
  for (const EncodeCase& c : AllCases()) {
    for (int s : {-20, -5, -1, 1, 4, 12, 60}) {
      SweepInterestingRange(c, s, uint64_t{1} << 16);
    }
  }
}

TEST(EncodeTest, ExtremeScales) {
  const float tiny = std::numeric_limits<float>::denorm_min();
  const float huge = std::numeric_limits<float>::max();
  for (const EncodeCase& c : AllCases()) {
    for (int s : {-100000, -300, 300, 100000, std::numeric_limits<int>::max(),
                  std::numeric_limits<int>::min()}) {
      for (float x : {tiny, 1.0f, huge}) {
        const uint32_t sign_bit = 1u << (c.layout->Width() - 1);
        const uint32_t want = s > 0 ? c.overflow_mag : 0;
        EXPECT_EQ(c.encode(x, s), want) << c.name << " " << x << " " << s;
        EXPECT_EQ(c.encode(-x, s), sign_bit | want) << c.name;
      }
    }
  }
}

TEST(EncodeTest, KnownValues) {
  EXPECT_EQ(F16Encode(1.0f), 0x3C00);
  EXPECT_EQ(Bf16Encode(1.0f), 0x3F80);
  EXPECT_EQ(Fp8Encode(1.0f, Fp8Format::kE4M3), 0x38);
  EXPECT_EQ(Fp8Encode(1.0f, Fp8Format::kE5M2), 0x3C);
  EXPECT_EQ(Fp8Encode(-2.0f, Fp8Format::kE4M3), 0xC0);
  EXPECT_EQ(F16Encode(-0.0f), 0x8000);
  // Ties to even: 1 + 2^-11 is halfway between 1 and the next F16.
  EXPECT_EQ(F16Encode(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(F16Encode(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(Bf16Encode(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  // E4M3 subnormals: 2^-10 is half the smallest subnormal -> 0 (even).
  EXPECT_EQ(Fp8Encode(std::ldexp(1.0f, -10), Fp8Format::kE4M3), 0x00);
  EXPECT_EQ(
      Fp8Encode(std::nextafter(std::ldexp(1.0f, -10), 1.0f), Fp8Format::kE4M3),
      0x01);
  EXPECT_EQ(Fp8Encode(3 * std::ldexp(1.0f, -10), Fp8Format::kE4M3), 0x02);
  // Largest subnormal rounding up into the smallest normal.
  EXPECT_EQ(Fp8Encode(std::ldexp(15.0f, -10), Fp8Format::kE4M3), 0x08);
  EXPECT_EQ(F16Encode(std::ldexp(2047.0f, -25)), 0x0400);
}

// ---------------------------------------------------------------------------
// Overflow, saturation, infinities and NaN.

TEST(OverflowTest, F16AndBf16GoToInfinity) {
  EXPECT_EQ(F16Encode(65504.0f), 0x7BFF);
  EXPECT_EQ(F16Encode(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
  EXPECT_EQ(F16Encode(65520.0f), 0x7C00);  // Tie goes to the even "65536".
  EXPECT_EQ(F16Encode(-1e9f), 0xFC00);
  EXPECT_EQ(F16Encode(HUGE_VALF), 0x7C00);
  EXPECT_EQ(F16Encode(-HUGE_VALF), 0xFC00);
  EXPECT_EQ(Bf16Encode(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(Bf16Encode(-HUGE_VALF), 0xFF80);
  EXPECT_EQ(Bf16Encode(FromBits(0x7F7F7FFF)), 0x7F7F);
  EXPECT_EQ(Bf16Encode(FromBits(0x7F7F8000)), 0x7F80);
  EXPECT_EQ(Bf16Encode(FromBits(0x7F7F7FFF), 1), 0x7F80);
}

TEST(OverflowTest, Fp8SaturatingAndNot) {
  constexpr Saturation kSat = Saturation::kSaturate;
  constexpr Saturation kNon = Saturation::kNonSaturating;
  constexpr Fp8Format kE4 = Fp8Format::kE4M3;
  constexpr Fp8Format kE5 = Fp8Format::kE5M2;
  // E4M3: 464 is halfway between 448 (mantissa 110, even) and the would-be
  // 480 (111): stays 448. Anything above overflows.
  EXPECT_EQ(Fp8Encode(464.0f, kE4, 0, kNon), 0x7E);
  EXPECT_EQ(Fp8Encode(std::nextafter(464.0f, 1e9f), kE4, 0, kNon), 0x7F);
  EXPECT_EQ(Fp8Encode(std::nextafter(464.0f, 1e9f), kE4, 0, kSat), 0x7E);
  EXPECT_EQ(Fp8Encode(1e6f, kE4, 0, kSat), 0x7E);
  EXPECT_EQ(Fp8Encode(-1e6f, kE4, 0, kSat), 0xFE);
  EXPECT_EQ(Fp8Encode(-1e6f, kE4, 0, kNon), 0xFF);
  EXPECT_EQ(Fp8Encode(HUGE_VALF, kE4, 0, kSat), 0x7E);
  EXPECT_EQ(Fp8Encode(-HUGE_VALF, kE4, 0, kSat), 0xFE);
  EXPECT_EQ(Fp8Encode(HUGE_VALF, kE4, 0, kNon), 0x7F);
  // E5M2: 61440 is halfway between 57344 (mantissa 11, odd) and 65536:
  // goes up, i.e. overflows.
  EXPECT_EQ(Fp8Encode(std::nextafter(61440.0f, 0.0f), kE5, 0, kNon), 0x7B);
  EXPECT_EQ(Fp8Encode(61440.0f, kE5, 0, kNon), 0x7C);
  EXPECT_EQ(Fp8Encode(61440.0f, kE5, 0, kSat), 0x7B);
  EXPECT_EQ(Fp8Encode(-1e9f, kE5, 0, kNon), 0xFC);
  EXPECT_EQ(Fp8Encode(-1e9f, kE5, 0, kSat), 0xFB);
  EXPECT_EQ(Fp8Encode(HUGE_VALF, kE5, 0, kSat), 0x7B);
  EXPECT_EQ(Fp8Encode(-HUGE_VALF, kE5, 0, kNon), 0xFC);
  // The default is saturating.
  EXPECT_EQ(Fp8Encode(1e6f, kE4), 0x7E);
  EXPECT_EQ(RoundToFp8(1e6f, kE5), 57344.0f);
  // With a scale, overflow is judged after scaling.
  EXPECT_EQ(Fp8Encode(448.0f, kE4, 1, kNon), 0x7F);
  EXPECT_EQ(Fp8Encode(448.0f, kE4, -1, kNon), 0x76);  // 224.
}

TEST(NanTest, F16AndBf16KeepQuietNanPayloads) {
  // Every NaN code decodes to NaN and comes back with the quiet bit set and
  // the sign and payload unchanged.
  for (uint32_t c = 0; c < 65536; ++c) {
    const uint16_t code = static_cast<uint16_t>(c);
    if (std::isnan(RefValue(c, kF16Layout))) {
      ASSERT_TRUE(std::isnan(F16Decode(code))) << c;
      ASSERT_EQ(F16Encode(F16Decode(code)), code | 0x0200) << c;
    }
    if (std::isnan(RefValue(c, kBf16Layout))) {
      ASSERT_TRUE(std::isnan(Bf16Decode(code))) << c;
      ASSERT_EQ(Bf16Encode(Bf16Decode(code)), code | 0x0040) << c;
      ASSERT_EQ(Bf16Encode(Bf16Decode(code), 3), code | 0x0040) << c;
    }
  }
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(F16Encode(qnan), 0x7E00);
  EXPECT_EQ(F16Encode(-qnan), 0xFE00);
  EXPECT_EQ(Bf16Encode(qnan), 0x7FC0);
  // A signalling NaN whose payload is only in the dropped bits must not
  // become infinity.
  EXPECT_EQ(F16Encode(FromBits(0x7F800001)), 0x7E00);
  EXPECT_EQ(Bf16Encode(FromBits(0x7F800001)), 0x7FC0);
  EXPECT_TRUE(std::isnan(RoundToF16(qnan)));
  EXPECT_TRUE(std::isnan(RoundToBf16(qnan)));
}

TEST(NanTest, Fp8NanStaysNan) {
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  for (Saturation sat : {Saturation::kSaturate, Saturation::kNonSaturating}) {
    EXPECT_EQ(Fp8Encode(qnan, Fp8Format::kE4M3, 0, sat), 0x7F);
    EXPECT_EQ(Fp8Encode(-qnan, Fp8Format::kE4M3, 0, sat), 0xFF);
    EXPECT_EQ(Fp8Encode(qnan, Fp8Format::kE5M2, 0, sat), 0x7E);
    EXPECT_EQ(Fp8Encode(-qnan, Fp8Format::kE5M2, 5, sat), 0xFE);
    EXPECT_EQ(Fp8Encode(FromBits(0x7F800001), Fp8Format::kE5M2, 0, sat), 0x7E);
    EXPECT_TRUE(std::isnan(RoundToFp8(qnan, Fp8Format::kE4M3, 3, sat)));
  }
  // Every NaN code decodes to NaN and re-encodes to the canonical NaN.
  for (uint32_t c = 0; c < 256; ++c) {
    const uint8_t code = static_cast<uint8_t>(c);
    if (std::isnan(RefValue(c, kE5M2Layout))) {
      const float f = Fp8Decode(code, Fp8Format::kE5M2);
      ASSERT_TRUE(std::isnan(f));
      EXPECT_EQ(Fp8Encode(f, Fp8Format::kE5M2), (c & 0x80) | 0x7E);
    }
  }
}

// ---------------------------------------------------------------------------
// Scales.

TEST(ScaleTest, EncodeEqualsEncodeOfScaledValue) {
  // When x * 2^s is an exact normal float, the scaled encoder must agree with
  // encoding that product unscaled.
  for (Fp8Format fmt : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    for (int s : {-12, -3, 2, 9}) {
      SweepBits(Bits(1e-8f), Bits(1e8f), 1 << 16, [&](float x) {
        const float scaled = std::ldexp(x, s);
        ASSERT_TRUE(std::isnormal(scaled));
        ASSERT_EQ(Fp8Encode(x, fmt, s), Fp8Encode(scaled, fmt, 0)) << x;
      });
    }
  }
}

TEST(ScaleTest, DecodeAndRound) {
  EXPECT_EQ(Fp8Decode(0x38, Fp8Format::kE4M3, -2), 4.0f);
  EXPECT_EQ(Fp8Decode(0x7E, Fp8Format::kE4M3, 8), 1.75f);
  // 1000 * 2^-2 = 250 -> nearest E4M3 is 256 (spacing 16 in [128, 256]).
  EXPECT_EQ(RoundToFp8(1000.0f, Fp8Format::kE4M3, -2), 1024.0f);
  // Small values keep precision with a large scale.
  EXPECT_EQ(RoundToFp8(1e-6f, Fp8Format::kE4M3, 0), 0.0f);
  const int s = Fp8ScaleExpForAmax(1e-6f, Fp8Format::kE4M3);
  const float r = RoundToFp8(1e-6f, Fp8Format::kE4M3, s);
  EXPECT_NEAR(r, 1e-6f, 1e-6f / 16);
  EXPECT_EQ(RoundToF16(1.0f + std::ldexp(1.0f, -11)), 1.0f);
  EXPECT_EQ(RoundToF16(1e-8f), 0.0f);
  EXPECT_EQ(RoundToF16(1e5f), HUGE_VALF);
  // 0.75 ulp rounds up; 1.5 ulp is a tie that goes to the even mantissa.
  EXPECT_EQ(RoundToBf16(1.0f + std::ldexp(3.0f, -9)), 1.0f + 0.0078125f);
  EXPECT_EQ(RoundToBf16(1.0f + std::ldexp(3.0f, -8)), 1.0f + 0.015625f);
}

TEST(ScaleTest, ScaleExpForAmax) {
  EXPECT_EQ(Fp8ScaleExpForAmax(448.0f, Fp8Format::kE4M3), 0);
  EXPECT_EQ(Fp8ScaleExpForAmax(449.0f, Fp8Format::kE4M3), -1);
  EXPECT_EQ(Fp8ScaleExpForAmax(1.0f, Fp8Format::kE4M3), 8);
  EXPECT_EQ(Fp8ScaleExpForAmax(-1.0f, Fp8Format::kE4M3), 8);
  EXPECT_EQ(Fp8ScaleExpForAmax(1.0f, Fp8Format::kE5M2), 15);
  EXPECT_EQ(Fp8ScaleExpForAmax(0.0f, Fp8Format::kE4M3), 0);
  EXPECT_EQ(Fp8ScaleExpForAmax(-0.0f, Fp8Format::kE5M2), 0);
  EXPECT_EQ(Fp8ScaleExpForAmax(HUGE_VALF, Fp8Format::kE5M2), 0);
  EXPECT_EQ(Fp8ScaleExpForAmax(std::numeric_limits<float>::quiet_NaN(),
                               Fp8Format::kE4M3),
            0);
  // Property over all magnitudes: amax * 2^e fits, amax * 2^(e+1) does not.
  for (Fp8Format fmt : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    const double max = Fp8MaxFinite(fmt);
    SweepBits(1, 0x7F7FFFFF, 1 << 18, [&](float a) {
      const int e = Fp8ScaleExpForAmax(a, fmt);
      ASSERT_LE(std::ldexp(static_cast<double>(a), e), max) << a;
      ASSERT_GT(std::ldexp(static_cast<double>(a), e + 1), max) << a;
      // So the tensor's max never overflows, even without saturation.
      const uint8_t code = Fp8Encode(a, fmt, e, Saturation::kNonSaturating);
      ASSERT_TRUE(std::isfinite(Fp8Decode(code, fmt))) << a;
    });
  }
}

TEST(ScaleTest, ScaleExpForTensor) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> v = {1.0f, -300.0f, nan, HUGE_VALF, 2.0f};
  EXPECT_EQ(Fp8ScaleExpForTensor(v, Fp8Format::kE4M3), 0);
  EXPECT_EQ(Fp8ScaleExpForTensor(std::vector<float>{-1000.0f, 3.0f},
                                 Fp8Format::kE4M3),
            -2);
  EXPECT_EQ(Fp8ScaleExpForTensor(std::vector<float>{}, Fp8Format::kE4M3), 0);
  EXPECT_EQ(
      Fp8ScaleExpForTensor(std::vector<float>{0.0f, -0.0f}, Fp8Format::kE5M2),
      0);
}

// ---------------------------------------------------------------------------
// Bulk helpers agree with the scalar path.

std::vector<float> SampleFloats() {
  std::vector<float> v;
  SweepBits(0, 0xFFFFFFFF, 1 << 16, [&](float x) { v.push_back(x); });
  SweepBits(Bits(1e-9f), Bits(1e6f), 1 << 16, [&](float x) {
    v.push_back(x);
    v.push_back(-x);
  });
  v.push_back(std::numeric_limits<float>::quiet_NaN());
  return v;
}

bool SameFloat(float a, float b) {
  return Bits(a) == Bits(b) || (std::isnan(a) && std::isnan(b));
}

TEST(BulkTest, ArraysMatchScalar) {
  const std::vector<float> xs = SampleFloats();
  const size_t n = xs.size();
  std::vector<uint16_t> c16(n);
  std::vector<uint8_t> c8(n);
  std::vector<float> out(n);
  for (int s : {0, 5, -7, 200}) {
    F16EncodeArray(xs, c16, s);
    F16DecodeArray(c16, out, s);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(c16[i], F16Encode(xs[i], s)) << i;
      ASSERT_TRUE(SameFloat(out[i], F16Decode(c16[i], s))) << i;
    }
    Bf16EncodeArray(xs, c16, s);
    Bf16DecodeArray(c16, out, s);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(c16[i], Bf16Encode(xs[i], s)) << i;
      ASSERT_TRUE(SameFloat(out[i], Bf16Decode(c16[i], s))) << i;
    }
    for (Fp8Format fmt : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
      for (Saturation sat :
           {Saturation::kSaturate, Saturation::kNonSaturating}) {
        Fp8EncodeArray(xs, c8, fmt, s, sat);
        Fp8DecodeArray(c8, out, fmt, s);
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(c8[i], Fp8Encode(xs[i], fmt, s, sat)) << i;
          ASSERT_TRUE(SameFloat(out[i], Fp8Decode(c8[i], fmt, s))) << i;
        }
      }
    }
  }
}

// Floats of every sign and exponent with each of `mantissas`, the
// mantissas around the half-way points of dropping first_shift to 23 bits
// (below, at and above, with each of `kept` above them: odd and even kept
// LSBs) and `random` pseudo-random ones from `seed`; then `tail`, for an
// odd count whose last elements take the scalar tail of a bulk converter.
std::vector<float> EveryExponentAroundHalfWays(
    std::vector<uint32_t> mantissas, int first_shift,
    std::initializer_list<uint32_t> kept, int random, uint32_t seed,
    float tail) {
  for (int shift = first_shift; shift <= 23; ++shift) {
    for (uint32_t k : kept) {
      const uint32_t half = 1u << (shift - 1);
      for (int64_t d : {-1, 0, 1}) {
        const uint64_t m = (uint64_t{k} << shift) + half + d;
        if (m <= 0x7FFFFF) mantissas.push_back(static_cast<uint32_t>(m));
      }
    }
  }
  for (int i = 0; i < random; ++i) {
    seed = seed * 1664525u + 1013904223u;
    mantissas.push_back(seed >> 9);
  }
  std::vector<float> xs;
  for (uint32_t sign_exp = 0; sign_exp < 512; ++sign_exp) {
    for (uint32_t m : mantissas) {
      xs.push_back(std::bit_cast<float>((sign_exp << 23) | m));
    }
  }
  xs.push_back(tail);
  return xs;
}

// The bulk F16 encoder may use the host's conversion instruction for
// unscaled data; it must give EncodeF16's bits for every float. (Checked
// once over all 2^32 patterns; here every sign and exponent with mantissas
// around each rounding boundary, odd lengths for the scalar tail.)
TEST(BulkTest, F16EncodeArrayMatchesScalarOnEveryExponent) {
  // 13 dropped bits for normals, up to 24 for F16 subnormals.
  const std::vector<float> xs = EveryExponentAroundHalfWays(
      {0u, 1u, 0x7FFFFFu, 0x400000u, 0x3FFFFFu, 0x200000u}, 13,
      {0u, 1u, 2u, 3u, 0x3FFu}, 2000, 12345, 1.0f);
  std::vector<uint16_t> codes(xs.size());
  F16EncodeArray(xs, codes);
  std::vector<uint8_t> bytes(xs.size() * 2);
  StoreArrayAs(DType::kF16, xs, 0, bytes);
  for (size_t i = 0; i < xs.size(); ++i) {
    const uint16_t want = F16Encode(xs[i]);
    ASSERT_EQ(codes[i], want) << "float bits " << Bits(xs[i]);
    ASSERT_EQ(bytes[2 * i] | (bytes[2 * i + 1] << 8), want)
        << "float bits " << Bits(xs[i]);
  }
}

// The bulk FP8 encoder may encode eight floats at a time in integer lanes;
// it must give Fp8Encode's code for every float, format, saturation and
// scale (checked once over all 2^32 patterns at scales -9, 0 and 11; here
// every sign and exponent with mantissas around each rounding boundary the
// formats' normals and subnormals drop to, groups with float subnormals,
// infinities and NaNs, and an odd length for the scalar tail).
TEST(BulkTest, Fp8EncodeArrayMatchesScalarOnEveryExponent) {
  // 20 (E4M3) or 21 (E5M2) dropped bits for normals, more for subnormals.
  const std::vector<float> xs = EveryExponentAroundHalfWays(
      {0u, 1u, 0x7FFFFFu, 0x400000u, 0x3FFFFFu}, 20, {0u, 1u, 2u, 3u, 7u}, 300,
      777, 0.75f);
  std::vector<uint8_t> codes(xs.size());
  for (int s : {-30, -9, 0, 5, 11, 40}) {
    for (Fp8Format fmt : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
      for (Saturation sat :
           {Saturation::kSaturate, Saturation::kNonSaturating}) {
        Fp8EncodeArray(xs, codes, fmt, s, sat);
        for (size_t i = 0; i < xs.size(); ++i) {
          ASSERT_EQ(codes[i], Fp8Encode(xs[i], fmt, s, sat))
              << "float bits " << Bits(xs[i]) << " scale " << s;
        }
      }
    }
  }
}

// The bulk FP8 decoder may decode sixteen codes at a time through the
// host's F16 conversion; it must give Fp8Decode's exact bits (NaN payloads
// included) for every code, format and scale, in groups with and without
// NaN codes and in the scalar tail.
TEST(BulkTest, Fp8DecodeArrayMatchesScalarBitForBit) {
  std::vector<uint8_t> codes;
  for (int c = 0; c < 256; ++c) codes.push_back(static_cast<uint8_t>(c));
  // NaN-free groups (all codes but the NaNs of both formats, 0x7D..0x7F
  // and 0xFD..0xFF), then the same codes reversed, then a 7-code tail.
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) < 0x7D) codes.push_back(static_cast<uint8_t>(c));
  }
  for (int c = 255; c >= 0; --c) codes.push_back(static_cast<uint8_t>(c));
  for (int c : {1, 0x80, 0x7F, 0x7C, 0x08, 0x77, 0xF0}) {
    codes.push_back(static_cast<uint8_t>(c));
  }
  std::vector<float> out(codes.size());
  for (Fp8Format fmt : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    for (int s : {0,    1,   -1,   4,    -7,   8,    -8,  100,  -100, 118,
                  119,  120, -118, -119, -120, 126,  127, 128,  -126, -127,
                  -128, 134, 135,  -135, 140,  -140, 300, -300, 5000, -5000}) {
      Fp8DecodeArray(codes, out, fmt, s);
      for (size_t i = 0; i < codes.size(); ++i) {
        ASSERT_EQ(Bits(out[i]), Bits(Fp8Decode(codes[i], fmt, s)))
            << "format " << static_cast<int>(fmt) << " scale " << s << " code "
            << int{codes[i]} << " at " << i;
      }
    }
  }
}

// Likewise the bulk F16 decoders (eight codes at a time through F16C where
// the host has it): F16Decode's exact bits for every code.
TEST(BulkTest, F16DecodeArraysMatchScalarBitForBit) {
  std::vector<uint16_t> codes(65536 + 5);
  for (size_t c = 0; c < codes.size(); ++c) {
    codes[c] = static_cast<uint16_t>(c * 40503u);  // every code, mixed
  }
  for (size_t c = 0; c < 65536; ++c) codes.push_back(static_cast<uint16_t>(c));
  std::vector<float> out(codes.size()), out_le(codes.size());
  std::vector<uint8_t> bytes(codes.size() * 2);
  for (size_t i = 0; i < codes.size(); ++i) {
    bytes[2 * i] = static_cast<uint8_t>(codes[i]);
    bytes[2 * i + 1] = static_cast<uint8_t>(codes[i] >> 8);
  }
  for (int s : {0, 3, -3, 100, -100, 126, 127, -126, -127, 140, -140, 1000}) {
    F16DecodeArray(codes, out, s);
    LoadArrayAs(DType::kF16, bytes, s, out_le);
    for (size_t i = 0; i < codes.size(); ++i) {
      const uint32_t want = Bits(F16Decode(codes[i], s));
      ASSERT_EQ(Bits(out[i]), want) << "scale " << s << " code " << codes[i];
      ASSERT_EQ(Bits(out_le[i]), want) << "scale " << s << " code " << codes[i];
    }
  }
}

TEST(BulkTest, DecodeArraysCoverAllCodes) {
  std::vector<uint16_t> codes(65536);
  for (uint32_t c = 0; c < 65536; ++c) codes[c] = static_cast<uint16_t>(c);
  std::vector<float> out(65536);
  F16DecodeArray(codes, out);
  for (uint32_t c = 0; c < 65536; ++c) {
    ASSERT_EQ(Bits(out[c]), Bits(F16Decode(static_cast<uint16_t>(c)))) << c;
  }
  std::vector<uint8_t> codes8(256);
  for (uint32_t c = 0; c < 256; ++c) codes8[c] = static_cast<uint8_t>(c);
  std::vector<float> out8(256);
  Fp8DecodeArray(codes8, out8, Fp8Format::kE5M2, -3);
  for (uint32_t c = 0; c < 256; ++c) {
    ASSERT_TRUE(SameFloat(out8[c], Fp8Decode(codes8[c], Fp8Format::kE5M2, -3)))
        << c;
  }
}

// ---------------------------------------------------------------------------
// DType storage.

TEST(DTypeTest, NamesAndSizes) {
  EXPECT_EQ(DTypeName(DType::kF32), "f32");
  EXPECT_EQ(DTypeName(DType::kF16), "f16");
  EXPECT_EQ(DTypeName(DType::kBF16), "bf16");
  EXPECT_EQ(DTypeName(DType::kFp8E4M3), "fp8e4m3");
  EXPECT_EQ(DTypeName(DType::kFp8E5M2), "fp8e5m2");
  EXPECT_EQ(DTypeBytes(DType::kF32), 4);
  EXPECT_EQ(DTypeBytes(DType::kF16), 2);
  EXPECT_EQ(DTypeBytes(DType::kBF16), 2);
  EXPECT_EQ(DTypeBytes(DType::kFp8E4M3), 1);
  EXPECT_EQ(DTypeBytes(DType::kFp8E5M2), 1);
}

TEST(DTypeTest, LittleEndianBytes) {
  uint8_t b[4] = {};
  StoreAs(DType::kF32, 1.0f, 0, b);
  EXPECT_EQ(std::vector<uint8_t>(b, b + 4),
            (std::vector<uint8_t>{0x00, 0x00, 0x80, 0x3F}));
  EXPECT_EQ(LoadAs(DType::kF32, b, 0), 1.0f);
  StoreAs(DType::kF16, -2.0f, 0, b);
  EXPECT_EQ(b[0], 0x00);
  EXPECT_EQ(b[1], 0xC0);
  EXPECT_EQ(LoadAs(DType::kF16, b, 0), -2.0f);
  StoreAs(DType::kBF16, 1.0f, 0, b);
  EXPECT_EQ(b[0], 0x80);
  EXPECT_EQ(b[1], 0x3F);
  StoreAs(DType::kF16, 1.0f + std::ldexp(1.0f, -10), 0, b);  // 0x3C01.
  EXPECT_EQ(b[0], 0x01);
  EXPECT_EQ(b[1], 0x3C);
  StoreAs(DType::kFp8E4M3, 1.0f, 0, b);
  EXPECT_EQ(b[0], 0x38);
  StoreAs(DType::kFp8E5M2, 1.0f, 0, b);
  EXPECT_EQ(b[0], 0x3C);
  // FP8 storage saturates.
  StoreAs(DType::kFp8E4M3, 1e9f, 0, b);
  EXPECT_EQ(b[0], 0x7E);
}

TEST(DTypeTest, ScaleAppliesToEveryDType) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kFp8E4M3,
                  DType::kFp8E5M2}) {
    uint8_t b[4] = {};
    StoreAs(d, 3.0f, 2, b);  // Stored value is 12.
    EXPECT_EQ(LoadAs(d, b, 0), 12.0f) << DTypeName(d);
    EXPECT_EQ(LoadAs(d, b, 2), 3.0f) << DTypeName(d);
  }
}

TEST(DTypeTest, ScalarStoreMatchesFormatEncoders) {
  const std::vector<float> xs = SampleFloats();
  for (int s : {0, 3, -6}) {
    for (float x : xs) {
      uint8_t b[4] = {};
      StoreAs(DType::kF16, x, s, b);
      ASSERT_EQ(b[0] | (b[1] << 8), F16Encode(x, s));
      ASSERT_TRUE(
          SameFloat(LoadAs(DType::kF16, b, s), F16Decode(F16Encode(x, s), s)));
      StoreAs(DType::kBF16, x, s, b);
      ASSERT_EQ(b[0] | (b[1] << 8), Bf16Encode(x, s));
      StoreAs(DType::kFp8E4M3, x, s, b);
      ASSERT_EQ(b[0], Fp8Encode(x, Fp8Format::kE4M3, s));
      ASSERT_TRUE(SameFloat(LoadAs(DType::kFp8E4M3, b, s),
                            Fp8Decode(b[0], Fp8Format::kE4M3, s)));
      StoreAs(DType::kFp8E5M2, x, s, b);
      ASSERT_EQ(b[0], Fp8Encode(x, Fp8Format::kE5M2, s));
      StoreAs(DType::kF32, x, s, b);
      ASSERT_TRUE(SameFloat(LoadAs(DType::kF32, b, 0),
                            RefToFloat(std::ldexp(double{x}, s))));
    }
  }
}

TEST(DTypeTest, ArraysMatchScalar) {
  const std::vector<float> xs = SampleFloats();
  const size_t n = xs.size();
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kFp8E4M3,
                  DType::kFp8E5M2}) {
    const size_t w = static_cast<size_t>(DTypeBytes(d));
    for (int s : {0, 4, -300}) {
      std::vector<uint8_t> bytes(n * w);
      std::vector<float> back(n);
      StoreArrayAs(d, xs, s, bytes);
      LoadArrayAs(d, bytes, s, back);
      for (size_t i = 0; i < n; ++i) {
        uint8_t b[4] = {};
        StoreAs(d, xs[i], s, b);
        ASSERT_TRUE(std::equal(b, b + w, bytes.begin() + i * w))
            << DTypeName(d) << " " << i;
        ASSERT_TRUE(SameFloat(back[i], LoadAs(d, b, s)))
            << DTypeName(d) << " " << i;
      }
    }
  }
}

}  // namespace
}  // namespace tilec::kernels
