#include "sim/tensor_data.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <thread>

#include "formats/basics.h"
#include "formats/ir.h"
#include "kernels/fb_dtype.h"
#include "kernels/host_cpu.h"

namespace tilec::kernels {
namespace {

// Far beyond any tensor that fits in memory; keeps byte counts (x 4) and
// pair counters far from overflow.
constexpr int64_t kMaxElements = int64_t{1} << 48;

// ---------------------------------------------------------------- hashing

constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ULL;

// The splitmix64 output function (Steele, Lea, Flood 2014).
constexpr uint64_t kMixMultiplier1 = 0xBF58476D1CE4E5B9ULL;
constexpr uint64_t kMixMultiplier2 = 0x94D049BB133111EBULL;
constexpr uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * kMixMultiplier1;
  z = (z ^ (z >> 27)) * kMixMultiplier2;
  return z ^ (z >> 31);
}

// The counter-th output of a splitmix64 stream keyed by `key`: computed
// directly, so any element can be generated without its predecessors.
constexpr uint64_t StreamBits(uint64_t key, uint64_t counter) {
  return Mix64(key + (counter + 1) * kGoldenGamma);
}

// [0, 1) with 53 random bits: exact in double.
constexpr double UnitOpen1(uint64_t bits) {
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}
// (0, 1]: never zero, so its logarithm is finite.
constexpr double UnitOpen0(uint64_t bits) {
  return static_cast<double>((bits >> 11) + 1) * 0x1.0p-53;
}

// ---------------------------------------------------------------- math
// Logarithm and sine/cosine from IEEE basic operations only, so that the
// generated weights do not depend on the platform's libm. Accuracy is a few
// ulps of double, far below the F32 rounding that follows.

constexpr double kLn2 = 0.6931471805599453094;
constexpr double kSqrtHalf = 0.7071067811865475244;
constexpr double kHalfPi = 1.5707963267948966192;

// 1/n! for n < 20, computed at compile time (IEEE double in constexpr).
constexpr std::array<double, 20> InverseFactorials() {
  std::array<double, 20> table{};
  double f = 1.0;
  for (int n = 0; n < 20; ++n) {
    if (n > 0) f *= n;
    table[n] = 1.0 / f;
  }
  return table;
}
constexpr std::array<double, 20> kInvFact = InverseFactorials();

// 1/n for n < 24, computed at compile time: the same correctly rounded
// quotients Log's series divided out at run time, 11 divisions per pair
// (the generator's hottest instructions under perf).
constexpr std::array<double, 24> Reciprocals() {
  std::array<double, 24> table{};
  for (int n = 1; n < 24; ++n) table[n] = 1.0 / n;
  return table;
}
constexpr std::array<double, 24> kInv = Reciprocals();

// ln(x) for normal x > 0 (UnitOpen0's values are): x = m * 2^e with m in
// [sqrt(1/2), sqrt(2)), then ln m = 2 atanh(s), s = (m - 1) / (m + 1),
// |s| < 0.172, whose odd series has converged to double precision by s^23.
// Branch-free, since branches on random inputs mispredict: frexp's m in
// [0.5, 1) is x's significand under exponent field 1022, and doubling it
// adds 1 to that field, both exact.
double Log(double x) {
  constexpr uint64_t kExponentField = uint64_t{0x7FF} << 52;
  const uint64_t bits = std::bit_cast<uint64_t>(x);
  int64_t e = static_cast<int64_t>(bits >> 52) - 1022;
  double m = std::bit_cast<double>((bits & ~kExponentField) |
                                   (uint64_t{1022} << 52));
  const uint64_t low = m < kSqrtHalf;
  m = std::bit_cast<double>(std::bit_cast<uint64_t>(m) + (low << 52));
  e -= static_cast<int64_t>(low);
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  double series = kInv[23];
  for (int k = 21; k >= 1; k -= 2) series = kInv[k] + s2 * series;
  return static_cast<double>(e) * kLn2 + 2.0 * s * series;
}

// sin and cos of a in [0, pi/4] by their Taylor series (the next terms are
// below 1e-19).
void SinCosSmall(double a, double* sin_a, double* cos_a) {
  const double a2 = a * a;
  double s = kInvFact[19];
  for (int n = 17; n >= 1; n -= 2) s = kInvFact[n] - a2 * s;
  double c = kInvFact[18];
  for (int n = 16; n >= 0; n -= 2) c = kInvFact[n] - a2 * c;
  *sin_a = a * s;
  *cos_a = c;
}

// sin and cos of 2 pi u for u in [0, 1). The reduction works on u, where it
// is exact: u = (q + f) / 4 with quadrant q and f in [0, 1), and f > 1/2 is
// folded to 1 - f with sine and cosine swapped.
void SinCosTurns(double u, double* sin_t, double* cos_t) {
  const double four_u = 4.0 * u;  // exact
  const int q = static_cast<int>(four_u);
  const double f = four_u - q;  // exact
  // Branch-free, as Log: bit masks choose between the folded and unfolded
  // angle, and between sine and cosine; a sign flip is a negation.
  const uint64_t folded = -static_cast<uint64_t>(!(f <= 0.5));
  const double angle = std::bit_cast<double>(
      (std::bit_cast<uint64_t>(1.0 - f) & folded) |
      (std::bit_cast<uint64_t>(f) & ~folded));
  double s, c;
  SinCosSmall(angle * kHalfPi, &s, &c);
  // Quadrants 0..3 give (s, c), (c, -s), (-s, -c), (-c, s) of the unfolded
  // pair; folding swaps s and c first.
  const uint64_t swap = folded ^ -static_cast<uint64_t>(q & 1);
  const uint64_t sb = std::bit_cast<uint64_t>(s);
  const uint64_t cb = std::bit_cast<uint64_t>(c);
  constexpr uint64_t kSign = uint64_t{1} << 63;
  const uint64_t sin_sign = (q & 2) ? kSign : 0;
  const uint64_t cos_sign = ((q + 1) & 2) ? kSign : 0;
  *sin_t = std::bit_cast<double>(((cb & swap) | (sb & ~swap)) ^ sin_sign);
  *cos_t = std::bit_cast<double>(((sb & swap) | (cb & ~swap)) ^ cos_sign);
}

}  // namespace

Status ShapeElements(const std::vector<int64_t>& shape, const std::string& what,
                     size_t* count) {
  int64_t product = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      return Status::BadInput(what + " has a negative dimension " +
                              std::to_string(d));
    }
    if (d != 0 && product > kMaxElements / d) {
      return Status::BadInput(what + " has too many elements");
    }
    product *= d;
  }
  *count = static_cast<size_t>(product);
  return Status::Ok();
}

std::string DescribeValue(const fb::ValueT& value) {
  return "value " + std::to_string(value.id) + " (" + value.name + ")";
}

DType KernelDType(fb::DType dtype) {
  // Values outside the enum never pass the IR verifier.
  StatusOr<DType> known = DTypeFromFb(dtype);
  return known.ok() ? *known : DType::kF32;
}

namespace {

// Tensors of this many elements or more (a whole model's weights are 10^8)
// are generated and rounded on two threads: every element is independent.
constexpr size_t kParallelFrom = size_t{1} << 20;

void RoundRange(DType kd, int scale, std::span<float> data) {
  // Chunks keep the byte staging small for large tensors.
  constexpr size_t kChunk = 1 << 14;
  std::vector<uint8_t> bytes(kChunk * DTypeBytes(kd));
  for (size_t begin = 0; begin < data.size(); begin += kChunk) {
    const size_t n = std::min(kChunk, data.size() - begin);
    std::span<float> part = data.subspan(begin, n);
    std::span<uint8_t> staged(bytes.data(), n * DTypeBytes(kd));
    StoreArrayAs(kd, part, scale, staged);
    LoadArrayAs(kd, staged, scale, part);
  }
}

}  // namespace

void RoundToStored(fb::DType dtype, int fp8_scale_exp, std::span<float> data) {
  const DType kd = KernelDType(dtype);
  if (kd == DType::kF32 || data.empty()) return;
  const int scale = ir::StorageScaleExp(dtype, fp8_scale_exp);
  if (data.size() < kParallelFrom) {
    RoundRange(kd, scale, data);
    return;
  }
  const size_t half = data.size() / 2;
  std::thread second([&] { RoundRange(kd, scale, data.subspan(half)); });
  RoundRange(kd, scale, data.first(half));
  second.join();
}

std::string EncodeStored(fb::DType dtype, int fp8_scale_exp,
                         std::span<const float> data) {
  const DType kd = KernelDType(dtype);
  std::string bytes(data.size() * DTypeBytes(kd), '\0');
  if (!data.empty()) {
    StoreArrayAs(kd, data, ir::StorageScaleExp(dtype, fp8_scale_exp),
                 std::span<uint8_t>(reinterpret_cast<uint8_t*>(bytes.data()),
                                    bytes.size()));
  }
  return bytes;
}

namespace {

// Elements [begin, end) of a generated init (begin even), one at a time:
// every element depends only on its counter, so ranges can be filled on
// any thread. The vectorized loop below must give the same bits.
void GenerateRangeScalar(const fb::WeightInitT& init, uint64_t key,
                         size_t begin, size_t end, float* data) {
  const double mean = init.mean;
  const double stddev = init.stddev;
  switch (init.distribution) {
    case fb::Distribution::Constant:
      std::fill(data + begin, data + end, init.mean);
      break;
    case fb::Distribution::Uniform:
      for (size_t i = begin; i < end; ++i) {
        const double u = UnitOpen1(StreamBits(key, i));
        data[i] = static_cast<float>(mean + stddev * (2.0 * u - 1.0));
      }
      break;
    case fb::Distribution::Gaussian:
      // Box-Muller on pair p = i / 2 from counters 2p and 2p + 1: the cosine
      // branch gives the even element, the sine branch the odd one.
      for (size_t p = begin / 2; 2 * p < end; ++p) {
        const double u1 = UnitOpen0(StreamBits(key, 2 * p));
        const double u2 = UnitOpen1(StreamBits(key, 2 * p + 1));
        const double r = std::sqrt(-2.0 * Log(u1));
        double s, c;
        SinCosTurns(u2, &s, &c);
        data[2 * p] = static_cast<float>(mean + stddev * (r * c));
        if (2 * p + 1 < end) {
          data[2 * p + 1] = static_cast<float>(mean + stddev * (r * s));
        }
      }
      break;
  }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TILEC_GENERATE_VECTORS 1

// The scalar generator several lanes at a time (GCC vector extensions, no
// FMA): the same IEEE operations on the same operands in the same order, so
// every lane rounds exactly as GenerateRangeScalar does; integer steps are
// exact either way. Conversions between integers and doubles go through
// exact bit tricks, since AVX2 has no 64-bit ones. Written once over the
// lane count: four lanes under AVX2, eight under AVX-512 (whose DQ
// extension multiplies 64-bit integers, Mix64's two products, in one
// instruction instead of AVX2's three).
// The eight-lane helpers take and return ZMM-sized vectors while compiled
// for AVX2 (so that the four-lane loop can share them); they are always
// inlined into the AVX-512 loop, so no call passes one by an ABI. (GCC
// warns where it instantiates them, at the end of the file: the warning
// stays off from here on.)
#pragma GCC diagnostic ignored "-Wpsabi"

template <int N>
struct Lanes {
  static constexpr int kCount = N;
  typedef double Doubles __attribute__((vector_size(8 * N)));
  typedef uint64_t Words __attribute__((vector_size(8 * N)));
  typedef int64_t Masks __attribute__((vector_size(8 * N)));
  typedef float Floats __attribute__((vector_size(4 * N)));
};
using FourLanes = Lanes<4>;
using EightLanes = Lanes<8>;

// Helpers inlined into the vector loops below (TILEC_AVX2_INLINE: compiled
// as AVX2 at least, as AVX-512 inside the AVX-512 loops).

template <typename L>
TILEC_AVX2_INLINE typename L::Doubles Splat(double x) {
  typename L::Doubles v;
  for (int l = 0; l < L::kCount; ++l) v[l] = x;
  return v;
}
template <typename L>
TILEC_AVX2_INLINE typename L::Words SplatWord(uint64_t x) {
  typename L::Words v;
  for (int l = 0; l < L::kCount; ++l) v[l] = x;
  return v;
}
template <typename L>
TILEC_AVX2_INLINE typename L::Doubles AsDoubles(typename L::Words w) {
  return reinterpret_cast<typename L::Doubles>(w);
}
template <typename L>
TILEC_AVX2_INLINE typename L::Words AsWords(typename L::Doubles d) {
  return reinterpret_cast<typename L::Words>(d);
}

template <typename L>
TILEC_AVX2_INLINE typename L::Words Mix64(typename L::Words z) {
  z = (z ^ (z >> 30)) * kMixMultiplier1;
  z = (z ^ (z >> 27)) * kMixMultiplier2;
  return z ^ (z >> 31);
}

// An integer below 2^53 as a double, exactly: its two halves below 2^32
// each become 2^52 + half by their bits, and the sum of the exact halves
// is exact.
template <typename L>
TILEC_AVX2_INLINE typename L::Doubles ToDouble53(typename L::Words x) {
  const typename L::Words two52 = SplatWord<L>(0x4330000000000000ULL);
  const typename L::Doubles high =
      AsDoubles<L>((x >> 32) | two52) - Splat<L>(0x1.0p52);
  const typename L::Doubles low =
      AsDoubles<L>((x & SplatWord<L>(0xFFFFFFFFULL)) | two52) -
      Splat<L>(0x1.0p52);
  return high * Splat<L>(0x1.0p32) + low;
}
// A small signed integer (|x| < 2^51) as a double, exactly.
template <typename L>
TILEC_AVX2_INLINE typename L::Doubles SmallToDouble(typename L::Masks x) {
  const typename L::Words biased = reinterpret_cast<typename L::Words>(x) +
                                   SplatWord<L>(0x4338000000000000ULL);
  return AsDoubles<L>(biased) - Splat<L>(0x1.8p52);
}

// Log above, lane by lane.
template <typename L>
TILEC_AVX2_INLINE typename L::Doubles LogLanes(typename L::Doubles x) {
  using Doubles = typename L::Doubles;
  using Words = typename L::Words;
  using Masks = typename L::Masks;
  constexpr uint64_t kExponentField = uint64_t{0x7FF} << 52;
  const Words bits = AsWords<L>(x);
  Masks e = reinterpret_cast<Masks>(bits >> 52) - 1022;
  Doubles m = AsDoubles<L>((bits & ~kExponentField) | (uint64_t{1022} << 52));
  const Masks low = m < Splat<L>(kSqrtHalf);  // -1 where true
  m = AsDoubles<L>(AsWords<L>(m) +
                   (reinterpret_cast<Words>(low) & (uint64_t{1} << 52)));
  e += low;
  const Doubles s = (m - 1.0) / (m + 1.0);
  const Doubles s2 = s * s;
  Doubles series = Splat<L>(kInv[23]);
  for (int k = 21; k >= 1; k -= 2) series = kInv[k] + s2 * series;
  return SmallToDouble<L>(e) * kLn2 + 2.0 * s * series;
}

// SinCosTurns above, lane by lane (u in [0, 1)).
template <typename L>
TILEC_AVX2_INLINE void SinCosTurnsLanes(typename L::Doubles u,
                                        typename L::Doubles* sin_t,
                                        typename L::Doubles* cos_t) {
  using Doubles = typename L::Doubles;
  using Words = typename L::Words;
  using Masks = typename L::Masks;
  const Doubles four_u = 4.0 * u;
  // The quadrant, as static_cast<int> truncates four_u in [0, 4).
  const Masks q = -((four_u >= 1.0) + (four_u >= 2.0) + (four_u >= 3.0));
  const Doubles f = four_u - SmallToDouble<L>(q);
  const Words folded = reinterpret_cast<Words>(~(f <= 0.5));
  const Doubles angle = AsDoubles<L>((AsWords<L>(1.0 - f) & folded) |
                                     (AsWords<L>(f) & ~folded));
  const Doubles a = angle * kHalfPi;
  const Doubles a2 = a * a;
  Doubles sa = Splat<L>(kInvFact[19]);
  for (int n = 17; n >= 1; n -= 2) sa = kInvFact[n] - a2 * sa;
  Doubles ca = Splat<L>(kInvFact[18]);
  for (int n = 16; n >= 0; n -= 2) ca = kInvFact[n] - a2 * ca;
  sa = a * sa;
  const Words qw = reinterpret_cast<Words>(q);
  const Words swap = folded ^ -(qw & 1);
  const Words sb = AsWords<L>(sa);
  const Words cb = AsWords<L>(ca);
  const Words sin_sign = (qw & 2) << 62;
  const Words cos_sign = ((qw + 1) & 2) << 62;
  *sin_t = AsDoubles<L>(((cb & swap) | (sb & ~swap)) ^ sin_sign);
  *cos_t = AsDoubles<L>(((sb & swap) | (cb & ~swap)) ^ cos_sign);
}

// The correctly rounded square root of each lane (IEEE, as std::sqrt);
// eight lanes as two halves, since a helper shared with the AVX2 loop may
// not use AVX-512 instructions itself.
TILEC_AVX2_INLINE FourLanes::Doubles SqrtLanes(FourLanes::Doubles x) {
  return __builtin_ia32_sqrtpd256(x);
}
TILEC_AVX2_INLINE EightLanes::Doubles SqrtLanes(EightLanes::Doubles x) {
  const FourLanes::Doubles low =
      SqrtLanes(__builtin_shufflevector(x, x, 0, 1, 2, 3));
  const FourLanes::Doubles high =
      SqrtLanes(__builtin_shufflevector(x, x, 4, 5, 6, 7));
  return __builtin_shufflevector(low, high, 0, 1, 2, 3, 4, 5, 6, 7);
}

// Pairs [p_begin, p_end) of a Gaussian init, L::kCount pairs a step;
// returns the first pair it left to the scalar loop.
template <typename L>
TILEC_AVX2_INLINE size_t GaussianPairs(const fb::WeightInitT& init,
                                       uint64_t key, size_t p_begin,
                                       size_t p_end, float* data) {
  using Doubles = typename L::Doubles;
  using Words = typename L::Words;
  using Floats = typename L::Floats;
  const Doubles mean = Splat<L>(init.mean);
  const Doubles stddev = Splat<L>(init.stddev);
  // StreamBits' key + (counter + 1) * gamma for counters 2p (u1) and
  // 2p + 1 (u2) of the lanes' pairs, advanced by addition (exact modulo
  // 2^64, as the product is).
  Words x1, x2;
  for (int l = 0; l < L::kCount; ++l) {
    x1[l] = key + (2 * (p_begin + l) + 1) * kGoldenGamma;
    x2[l] = x1[l] + kGoldenGamma;
  }
  const Words step = SplatWord<L>(2 * L::kCount * kGoldenGamma);
  size_t p = p_begin;
  for (; p + L::kCount <= p_end; p += L::kCount, x1 += step, x2 += step) {
    const Doubles u1 = ToDouble53<L>((Mix64<L>(x1) >> 11) + 1) * 0x1.0p-53;
    const Doubles u2 = ToDouble53<L>(Mix64<L>(x2) >> 11) * 0x1.0p-53;
    const Doubles r = SqrtLanes(-2.0 * LogLanes<L>(u1));
    Doubles s, c;
    SinCosTurnsLanes<L>(u2, &s, &c);
    const Floats even =
        __builtin_convertvector(mean + stddev * (r * c), Floats);
    const Floats odd = __builtin_convertvector(mean + stddev * (r * s), Floats);
    float* out = data + 2 * p;
    for (int l = 0; l < L::kCount; ++l) {
      out[2 * l] = even[l];
      out[2 * l + 1] = odd[l];
    }
  }
  return p;
}

// Elements [begin, end) of a uniform init, L::kCount a step; returns the
// first element it left to the scalar loop.
template <typename L>
TILEC_AVX2_INLINE size_t UniformLanes(const fb::WeightInitT& init,
                                      uint64_t key, size_t begin, size_t end,
                                      float* data) {
  using Doubles = typename L::Doubles;
  using Words = typename L::Words;
  using Floats = typename L::Floats;
  const Doubles mean = Splat<L>(init.mean);
  const Doubles stddev = Splat<L>(init.stddev);
  Words x;
  for (int l = 0; l < L::kCount; ++l) {
    x[l] = key + (begin + l + 1) * kGoldenGamma;
  }
  const Words step = SplatWord<L>(L::kCount * kGoldenGamma);
  size_t i = begin;
  for (; i + L::kCount <= end; i += L::kCount, x += step) {
    const Doubles u = ToDouble53<L>(Mix64<L>(x) >> 11) * 0x1.0p-53;
    const Floats v =
        __builtin_convertvector(mean + stddev * (2.0 * u - 1.0), Floats);
    std::memcpy(data + i, &v, sizeof(v));
  }
  return i;
}

// The first element of [begin, end) the vector loops of L's width left to
// the scalar loop, having filled those before it.
template <typename L>
TILEC_AVX2_INLINE size_t GenerateLanes(const fb::WeightInitT& init,
                                       uint64_t key, size_t begin, size_t end,
                                       float* data) {
  if (init.distribution == fb::Distribution::Gaussian) {
    // Whole pairs only: an odd end's last pair is left to the scalar loop.
    return 2 * GaussianPairs<L>(init, key, begin / 2, end / 2, data);
  }
  if (init.distribution == fb::Distribution::Uniform) {
    return UniformLanes<L>(init, key, begin, end, data);
  }
  return begin;
}

__attribute__((target("avx2"))) size_t GenerateAvx2(
    const fb::WeightInitT& init, uint64_t key, size_t begin, size_t end,
    float* data) {
  return GenerateLanes<FourLanes>(init, key, begin, end, data);
}

__attribute__((target("avx512f,avx512dq"))) size_t GenerateAvx512(
    const fb::WeightInitT& init, uint64_t key, size_t begin, size_t end,
    float* data) {
  return GenerateLanes<EightLanes>(init, key, begin, end, data);
}

#endif

// GenerateRangeScalar's elements, most of them by the vector loops where
// the host has AVX-512 (with DQ) or AVX2 and `path` allows them.
void GenerateRange(const fb::WeightInitT& init, uint64_t key, size_t begin,
                   size_t end, float* data, kernels::SimdPath path) {
#ifdef TILEC_GENERATE_VECTORS
  if (path == kernels::SimdPath::kFastest && HostHasAvx512dq()) {
    begin = GenerateAvx512(init, key, begin, end, data);
  } else if (path != kernels::SimdPath::kPortable && HostHasAvx2()) {
    begin = GenerateAvx2(init, key, begin, end, data);
  }
#endif
  GenerateRangeScalar(init, key, begin, end, data);
}

// Pre-mixing the seed decorrelates streams of nearby seeds (1, 2, ...).
uint64_t StreamKey(const fb::WeightInitT& init) { return Mix64(init.seed); }

}  // namespace

void GenerateInitRange(const fb::WeightInitT& init, size_t begin, size_t end,
                       float* data, kernels::SimdPath path) {
  GenerateRange(init, StreamKey(init), begin, end, data, path);
}

namespace {

// make(begin, end) over [0, count): large weights on two threads, split at
// an even point so each Box-Muller pair stays on one thread.
void InHalves(size_t count, const std::function<void(size_t, size_t)>& make) {
  if (count < kParallelFrom) {
    make(0, count);
    return;
  }
  const size_t half = (count / 2) & ~size_t{1};
  std::thread second([&] { make(half, count); });
  make(0, half);
  second.join();
}

}  // namespace

std::vector<float> GenerateInit(const fb::WeightInitT& init, size_t count) {
  std::vector<float> data(count);
  const uint64_t key = StreamKey(init);
  InHalves(count, [&](size_t begin, size_t end) {
    GenerateRange(init, key, begin, end, data.data(),
                  kernels::SimdPath::kFastest);
  });
  return data;
}

namespace {

// GenerateInit's elements rounded to the stored dtype (scale: the storage
// scale exponent) a cache-sized chunk at a time, on the thread that made
// them: the same numbers as RoundToStored after GenerateInit, without
// reading the whole tensor back from memory. Into `*out`'s memory, whatever
// it holds (a buffer of a freed value is not cleared first).
void GenerateRounded(const fb::WeightInitT& init, size_t count, DType kd,
                     int scale, std::vector<float>* out) {
  std::vector<float>& data = *out;
  data.resize(count);
  const uint64_t key = StreamKey(init);
  InHalves(count, [&](size_t begin, size_t end) {
    constexpr size_t kChunk = size_t{1} << 14;  // even: Box-Muller pairs
    for (size_t first = begin; first < end; first += kChunk) {
      const size_t last = std::min(end, first + kChunk);
      GenerateRange(init, key, first, last, data.data(),
                    kernels::SimdPath::kFastest);
      if (kd != DType::kF32) {
        RoundRange(kd, scale,
                   std::span<float>(data).subspan(first, last - first));
      }
    }
  });
}

Status ReadSidecar(const fb::ValueT& value, const std::string& sidecar_dir,
                   size_t count, std::vector<float>* data) {
  const fb::SidecarT& sidecar = *value.sidecar;
  const std::string dir = sidecar_dir.empty() ? "." : sidecar_dir;
  // Messages follow the IR's name: the sidecar is a plain name beside it.
  const std::string where = sidecar.path + ": sidecar of " +
                            DescribeValue(value);
  // The IR names the file: a plain name in `dir`, never a path out of it.
  if (!ir::IsPlainFileName(sidecar.path)) {
    return Status::BadInput(DescribeValue(value) + ": sidecar path '" +
                            sidecar.path.substr(0, 80) +
                            "' is not a plain file name");
  }
  if (sidecar.bytes != count * sizeof(float)) {
    return Status::BadInput(where + ": holds " + std::to_string(sidecar.bytes) +
                            " bytes, expected " +
                            std::to_string(count * sizeof(float)) + " (" +
                            std::to_string(count) + " F32 elements)");
  }
  std::string path;
  TILEC_RETURN_IF_ERROR(ir::ResolveInside(
      dir, sidecar.path, "sidecar of " + DescribeValue(value), &path));
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::BadInput(where + ": cannot open");
  in.seekg(0, std::ios::end);
  const uint64_t size = static_cast<uint64_t>(in.tellg());
  if (sidecar.offset > size || sidecar.bytes > size - sidecar.offset) {
    return Status::BadInput(where + ": bytes [" +
                            std::to_string(sidecar.offset) + ", " +
                            std::to_string(sidecar.offset + sidecar.bytes) +
                            ") lie beyond the end of the file (" +
                            std::to_string(size) + " bytes)");
  }
  std::string bytes(sidecar.bytes, '\0');
  in.seekg(static_cast<std::streamoff>(sidecar.offset));
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!in) return Status::BadInput(where + ": read failed");
  const uint64_t hash = ir::Fnv1a64(bytes);
  // Only whether it matches: the checksum of bytes the IR chose would tell
  // an attacker about them.
  if (hash != sidecar.fnv1a64) {
    return Status::BadInput(where + ": bytes [" +
                            std::to_string(sidecar.offset) + ", " +
                            std::to_string(sidecar.offset + sidecar.bytes) +
                            ") do not match the checksum the IR records");
  }
  data->resize(count);
  if (count > 0) {
    LoadArrayAs(
        DType::kF32,
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()),
                                 bytes.size()),
        0, *data);
  }
  return Status::Ok();
}

}  // namespace

Status MaterializeValue(const fb::ValueT& value, const std::string& sidecar_dir,
                        std::vector<float>* data) {
  size_t count = 0;
  TILEC_RETURN_IF_ERROR(
      ShapeElements(value.shape, DescribeValue(value), &count));
  if (value.sidecar != nullptr) {
    TILEC_RETURN_IF_ERROR(ReadSidecar(value, sidecar_dir, count, data));
  } else if (value.init != nullptr) {
    const fb::Distribution d = value.init->distribution;
    if (d < fb::Distribution::MIN || d > fb::Distribution::MAX) {
      return Status::BadInput(DescribeValue(value) +
                              " has an unknown init distribution " +
                              std::to_string(static_cast<int>(d)));
    }
    GenerateRounded(*value.init, count, KernelDType(value.dtype),
                    ir::StorageScaleExp(value.dtype, value.fp8_scale_exp),
                    data);
    return Status::Ok();
  } else {
    return Status::BadInput(
        DescribeValue(value) +
        " has no contents: neither a weight init nor a sidecar");
  }
  RoundToStored(value.dtype, value.fp8_scale_exp, *data);
  return Status::Ok();
}

Status MaterializeValue(const fb::ValueT& value, std::vector<float>* data) {
  return MaterializeValue(value, ".", data);
}

}  // namespace tilec::kernels
