// OpenBLAS (kernels/blas.h) and the matrix units (kernels/amx.h) against
// the tile kernels' k-order loop (kernels.h Gemm, portable path), and their
// determinism across threads.

#include "kernels/blas.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/amx.h"
#include "kernels/kernels.h"

namespace tilec::kernels {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

Operand F32(std::vector<float>& v) {
  return Operand{reinterpret_cast<uint8_t*>(v.data()), v.size() * sizeof(float),
                 DType::kF32, 0};
}

struct Shape {
  int64_t m, k, n;
};

std::string Name(const Shape& s) {
  return "[" + std::to_string(s.m) + "," + std::to_string(s.k) + "] x [" +
         std::to_string(s.k) + "," + std::to_string(s.n) + "]";
}

// Degenerate (0, 1) and prime shapes, some with rows or columns enough for
// two blocks of BlasMultiplyParallel and depths past OpenBLAS's k blocks.
const Shape kShapes[] = {
    {0, 5, 7},     {5, 0, 7},    {5, 7, 0},      {1, 1, 1},
    {1, 13, 1},    {2, 3, 5},    {7, 1, 11},     {13, 17, 19},
    {31, 37, 41},  {97, 101, 1}, {1, 257, 89},   {263, 61, 3},
    {61, 523, 67}, {3, 5, 521},  {521, 29, 127}, {59, 1031, 71},
};

// Two sums of the same products in different orders (each within
// gamma_k * sum |a b| of the exact one, gamma_k = k u / (1 - k u),
// u = 2^-24) differ by at most twice that.
double Bound(const std::vector<float>& a, const std::vector<float>& b,
             const Shape& s, int64_t i, int64_t j) {
  double magnitude = 0;
  for (int64_t p = 0; p < s.k; ++p) {
    magnitude += std::fabs(double(a[i * s.k + p]) * b[p * s.n + j]);
  }
  const double ku = double(s.k) * std::ldexp(1.0, -24);
  return 2 * ku / (1 - ku) * magnitude;
}

TEST(BlasTest, AgreesWithTheKOrderLoopWithinSummationError) {
  UseGemmPathForTesting(GemmPath::kPortable);
  uint32_t seed = 1;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(Name(s));
    std::vector<float> a = Random(s.m * s.k, seed++);
    std::vector<float> b = Random(s.k * s.n, seed++);
    std::vector<float> want(s.m * s.n), got(s.m * s.n, NAN);
    ASSERT_TRUE(Gemm(F32(a), F32(b), F32(want), s.m, s.k, s.n, false).ok());
    for (bool parallel : {false, true}) {
      BlasProduct p;
      p.m = s.m, p.k = s.k, p.n = s.n;
      p.a = a.data(), p.lda = s.k;
      p.b = b.data(), p.ldb = s.n;
      p.c = got.data(), p.ldc = s.n;
      ASSERT_TRUE(
          (parallel ? BlasMultiplyParallel(p, 2) : BlasMultiply(p)).ok());
      for (int64_t i = 0; i < s.m; ++i) {
        for (int64_t j = 0; j < s.n; ++j) {
          ASSERT_LE(std::fabs(double(got[i * s.n + j]) - want[i * s.n + j]),
                    Bound(a, b, s, i, j))
              << "C[" << i << "," << j << "]" << (parallel ? " parallel" : "");
        }
      }
    }
  }
  UseGemmPathForTesting(GemmPath::kFastest);
}

// B read transposed and every operand inside a wider matrix (strides), as
// attention reads its heads out of the fused qkv.
TEST(BlasTest, TransposedAndStridedOperands) {
  const int64_t m = 29, k = 23, n = 31, lda = 40, ldb = 50, ldc = 60;
  std::vector<float> a = Random(m * lda, 7), bt = Random(n * ldb, 8);
  std::vector<float> c(m * ldc, -1.0f);
  BlasProduct p;
  p.m = m, p.k = k, p.n = n;
  p.a = a.data(), p.lda = lda;
  p.b = bt.data(), p.ldb = ldb, p.transpose_b = true;
  p.c = c.data(), p.ldc = ldc;
  ASSERT_TRUE(BlasMultiply(p).ok());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      if (j >= n) {
        EXPECT_EQ(c[i * ldc + j], -1.0f) << "padding overwritten";
        continue;
      }
      double want = 0, magnitude = 0;
      for (int64_t q = 0; q < k; ++q) {
        want += double(a[i * lda + q]) * bt[j * ldb + q];
        magnitude += std::fabs(double(a[i * lda + q]) * bt[j * ldb + q]);
      }
      EXPECT_NEAR(c[i * ldc + j], want, magnitude * k * std::ldexp(1.0, -23))
          << i << "," << j;
    }
  }
}

// The thread count changes nothing: the same bytes with 1, 2, 3 and 8
// threads, on shapes with one block, several and a short last one, cut
// by rows and by columns; the so400m MLP down-projection among them, where
// OpenBLAS's own threads do change the bytes.
TEST(BlasTest, ThreadCountDoesNotChangeTheBytes) {
  const Shape shapes[] = {
      {5, 7, 3}, {300, 129, 1000}, {1031, 67, 257}, {729, 4304, 1152}};
  uint32_t seed = 100;
  for (const Shape& s : shapes) {
    SCOPED_TRACE(Name(s));
    std::vector<float> a = Random(s.m * s.k, seed++);
    std::vector<float> b = Random(s.k * s.n, seed++);
    std::vector<float> base(s.m * s.n);
    BlasProduct p;
    p.m = s.m, p.k = s.k, p.n = s.n;
    p.a = a.data(), p.lda = s.k;
    p.b = b.data(), p.ldb = s.n;
    p.c = base.data(), p.ldc = s.n;
    ASSERT_TRUE(BlasMultiplyParallel(p, 1).ok());
    for (int threads : {2, 3, 8}) {
      std::vector<float> other(s.m * s.n);
      p.c = other.data();
      ASSERT_TRUE(BlasMultiplyParallel(p, threads).ok());
      EXPECT_EQ(
          std::memcmp(base.data(), other.data(), base.size() * sizeof(float)),
          0)
          << threads << " threads";
    }
  }
}

// Values of `bits` significant bits (4: FP8 E4M3's, 11: F16's) times
// powers of two, a tenth of them zero.
std::vector<float> RandomOfBits(size_t n, int bits, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) {
    const uint32_t r = rng();
    if (r % 10 == 0) {
      x = 0;
      continue;
    }
    const uint32_t fraction = rng() % (1u << (bits - 1));
    const float magnitude =
        std::ldexp(1.0f + std::ldexp(static_cast<float>(fraction), 1 - bits),
                   static_cast<int>((r >> 8) % 24) - 12);
    x = (r >> 16) & 1 ? -magnitude : magnitude;
  }
  return v;
}

BlasProduct Product(const Shape& s, const std::vector<float>& a,
                    const std::vector<float>& b, bool transpose_b,
                    std::vector<float>* c) {
  BlasProduct p;
  p.m = s.m, p.k = s.k, p.n = s.n;
  p.a = a.data(), p.lda = s.k;
  p.b = b.data(), p.ldb = transpose_b ? s.k : s.n;
  p.transpose_b = transpose_b;
  p.c = c->data(), p.ldc = s.n;
  return p;
}

// Shapes past and short of whole tiles (16 rows, 32 k) and blocks (32 x 32
// of C), and attention's per-head products of so400m.
const Shape kTileShapes[] = {
    {0, 5, 7},     {5, 0, 7},    {5, 7, 0},      {1, 1, 1},      {1, 2, 1},
    {15, 31, 17},  {16, 32, 16}, {17, 33, 15},   {32, 64, 32},   {33, 65, 47},
    {61, 523, 67}, {3, 5, 521},  {521, 29, 127}, {729, 72, 729}, {729, 729, 72},
};

// Products of FP8 and F16 values go to the matrix units where the host has
// them and agree with the k-order loop within summation error (of k
// products, or 2k or 4k where an operand goes as two pieces), B plain or
// transposed, on one thread or several.
TEST(BlasTest, Fp8AndF16OperandsOnTheMatrixUnitsWithinSummationError) {
  if (!HostHasAmxBf16()) GTEST_SKIP() << "the host has no AMX-BF16";
  UseGemmPathForTesting(GemmPath::kPortable);
  uint32_t seed = 500;
  for (const auto& [a_bits, b_bits] : {std::pair{4, 4}, {11, 4}, {11, 11}}) {
    const int pieces = (a_bits > 8 ? 2 : 1) * (b_bits > 8 ? 2 : 1);
    for (const Shape& s : kTileShapes) {
      SCOPED_TRACE(Name(s) + " of " + std::to_string(a_bits) + " and " +
                   std::to_string(b_bits) + " bits");
      std::vector<float> a = RandomOfBits(s.m * s.k, a_bits, seed++);
      std::vector<float> b = RandomOfBits(s.k * s.n, b_bits, seed++);
      std::vector<float> bt(b.size());
      for (int64_t q = 0; q < s.k; ++q) {
        for (int64_t j = 0; j < s.n; ++j) bt[j * s.k + q] = b[q * s.n + j];
      }
      std::vector<float> want(s.m * s.n);
      ASSERT_TRUE(Gemm(F32(a), F32(b), F32(want), s.m, s.k, s.n, false).ok());
      for (bool transpose_b : {false, true}) {
        for (int threads : {1, 2}) {
          std::vector<float> got(s.m * s.n, NAN);
          const BlasProduct p =
              Product(s, a, transpose_b ? bt : b, transpose_b, &got);
          ASSERT_TRUE(BlasMultiplyParallel(p, threads).ok());
          if (s.m > 0 && s.k > 0 && s.n > 0) {
            // The units took it: the same bytes from them directly (an
            // empty product never reaches them).
            std::vector<float> again(got.size());
            BlasProduct q = p;
            q.c = again.data();
            ASSERT_TRUE(AmxMultiply(q, threads));
            ASSERT_EQ(again, got);
          }
          for (int64_t i = 0; i < s.m; ++i) {
            for (int64_t j = 0; j < s.n; ++j) {
              ASSERT_LE(std::fabs(double(got[i * s.n + j]) - want[i * s.n + j]),
                        pieces * Bound(a, b, s, i, j))
                  << "C[" << i << "," << j << "]" << (transpose_b ? " B^T" : "")
                  << ", " << threads << " threads";
            }
          }
        }
      }
    }
  }
  UseGemmPathForTesting(GemmPath::kFastest);
}

// The units' thread count changes no byte either.
TEST(BlasTest, MatrixUnitsThreadCountDoesNotChangeTheBytes) {
  if (!HostHasAmxBf16()) GTEST_SKIP() << "the host has no AMX-BF16";
  const Shape s{300, 1031, 257};
  std::vector<float> a = RandomOfBits(s.m * s.k, 11, 1);
  std::vector<float> b = RandomOfBits(s.k * s.n, 4, 2);
  std::vector<float> base(s.m * s.n);
  ASSERT_TRUE(BlasMultiplyParallel(Product(s, a, b, false, &base), 1).ok());
  for (int threads : {2, 3, 8}) {
    std::vector<float> other(s.m * s.n);
    ASSERT_TRUE(
        BlasMultiplyParallel(Product(s, a, b, false, &other), threads).ok());
    EXPECT_EQ(
        std::memcmp(base.data(), other.data(), base.size() * sizeof(float)), 0)
        << threads << " threads";
  }
}

// An operand with a value the units cannot take stays with OpenBLAS, C
// untouched by the units: one that is not the sum of two BF16 values (its
// high 16 bits and a rest of more than 8 significant bits), a subnormal (the
// units read it as zero, so 2^-130 * 2^100 would come out 0, not 2^-30),
// or an infinity among values of two pieces (its second piece would be
// inf - inf). An infinity among BF16 values is one.
TEST(BlasTest, OperandsTheUnitsCannotTakeStayWithOpenBlas) {
  const Shape s{40, 40, 40};
  const float inf = std::numeric_limits<float>::infinity();
  for (const auto& [odd, bits] :
       {std::pair{1.0f + std::ldexp(1.0f, -9) + std::ldexp(1.0f, -20), 4},
        {std::ldexp(1.0f, -130), 4},
        {inf, 11}}) {
    SCOPED_TRACE(std::to_string(odd) + " among values of " +
                 std::to_string(bits) + " bits");
    for (bool in_a : {true, false}) {
      std::vector<float> a = RandomOfBits(s.m * s.k, bits, 3);
      std::vector<float> b = RandomOfBits(s.k * s.n, bits, 4);
      (in_a ? a : b)[s.k * 20 + 39] = odd;
      std::vector<float> c(s.m * s.n, -1.0f);
      EXPECT_FALSE(AmxMultiply(Product(s, a, b, false, &c), 2));
      EXPECT_EQ(c, std::vector<float>(s.m * s.n, -1.0f));
    }
  }
  std::vector<float> a = {std::ldexp(1.0f, -130)}, b = {std::ldexp(1.0f, 100)};
  std::vector<float> c = {0};
  ASSERT_TRUE(BlasMultiply(Product({1, 1, 1}, a, b, false, &c)).ok());
  EXPECT_EQ(c[0], std::ldexp(1.0f, -30));
  if (!HostHasAmxBf16()) return;
  a = RandomOfBits(s.m * s.k, 4, 5);
  b = RandomOfBits(s.k * s.n, 4, 6);
  a[7] = inf;
  c.assign(s.m * s.n, 0);
  EXPECT_TRUE(AmxMultiply(Product(s, a, b, false, &c), 1));
}

TEST(BlasTest, RefusesWhatOpenBlasCannotTake) {
  float x = 0;
  BlasProduct p;
  p.m = 2, p.k = 3, p.n = 4;
  p.a = &x, p.lda = 2;  // shorter than k
  p.b = &x, p.ldb = 4;
  p.c = &x, p.ldc = 4;
  Status s = BlasMultiply(p);
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
  EXPECT_NE(s.message().find("row stride shorter"), std::string::npos)
      << s.message();
  p.lda = 3;
  p.n = int64_t{1} << 32, p.ldb = p.n, p.ldc = p.n;
  s = BlasMultiplyParallel(p, 2);
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
  EXPECT_NE(s.message().find("32-bit"), std::string::npos) << s.message();
  p.n = -1;
  EXPECT_EQ(BlasMultiply(p).code(), StatusCode::kBadInput);
}

}  // namespace
}  // namespace tilec::kernels
