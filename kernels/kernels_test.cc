#include "kernels/kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kernels/kernel_names.h"
#include "kernels/registry.h"
#include "kernels/test_target.h"

namespace tilec::kernels {
namespace {

// ---------------------------------------------------------------- helpers

// A tile-local buffer that owns its bytes.
struct Buffer {
  Buffer(DType dtype, size_t elements, int scale_exp = 0)
      : bytes(elements * DTypeBytes(dtype)),
        op{nullptr, bytes.size(), dtype, scale_exp} {
    op.data = bytes.data();
  }
  Buffer(const Buffer&) = delete;

  size_t size() const { return bytes.size() / DTypeBytes(op.dtype); }
  std::vector<float> Values() const { return LoadElements(op, size()); }
  float At(size_t i) const {
    return LoadAs(op.dtype, bytes.data() + i * DTypeBytes(op.dtype),
                  op.scale_exp);
  }
  void Set(const std::vector<float>& v) { StoreElements(op, v); }

  std::vector<uint8_t> bytes;
  Operand op;
};

std::vector<float> Random(size_t n, uint32_t seed, float stddev = 1.0f,
                          float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A buffer of `dtype` filled with random values (as stored, i.e. rounded).
std::unique_ptr<Buffer> RandomBuffer(DType dtype, size_t n, uint32_t seed,
                                     float stddev = 1.0f, int scale_exp = 0,
                                     float mean = 0.0f) {
  auto b = std::make_unique<Buffer>(dtype, n, scale_exp);
  b->Set(Random(n, seed, stddev, mean));
  return b;
}

// Allowed error of a value stored in `dtype`: half a unit in the last place
// relative to the value (twice that, to cover F32 math before the rounding),
// plus the format's smallest step near zero.
double Tolerance(DType dtype, double ref, int scale_exp = 0) {
  const double mag = std::fabs(ref);
  const double scale = std::ldexp(1.0, -scale_exp);
  switch (dtype) {
    case DType::kF32:
      return 1e-5 * mag + 1e-6;
    case DType::kF16:
      return std::ldexp(mag, -10) + std::ldexp(scale, -24) + 1e-6 * mag;
    case DType::kBF16:
      return std::ldexp(mag, -7) + 1e-6 * mag;
    case DType::kFp8E4M3:
      return std::ldexp(mag, -4) * 1.001 + std::ldexp(scale, -9);
    case DType::kFp8E5M2:
      return std::ldexp(mag, -3) * 1.001 + std::ldexp(scale, -16);
  }
  return 0;
}

// abs_tol covers F32 math whose intermediate terms are much larger than the
// result (LayerNorm's x - mean near the mean).
void ExpectNear(const std::vector<float>& got, const std::vector<double>& want,
                DType dtype, int scale_exp = 0, const std::string& what = "",
                double abs_tol = 0) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = Tolerance(dtype, want[i], scale_exp) + abs_tol;
    if (std::fabs(got[i] - want[i]) > tol && reported++ < 5) {
      ADD_FAILURE() << what << " element " << i << ": got " << got[i]
                    << ", want " << want[i] << " (tolerance " << tol << ")";
    }
  }
}

bool Contains(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

double GeluRef(double x, GeluForm form) {
  switch (form) {
    case GeluForm::kTanh:
      return 0.5 * x *
             (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case GeluForm::kErf:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case GeluForm::kQuick:
      return x / (1 + std::exp(-1.702 * x));
  }
  return 0;
}

class KernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StatusOr<CostModel> model = CostModel::Create(LoadTestTarget("ipu21"));
    ASSERT_TRUE(model.ok()) << model.status().message();
    model_.emplace(*model);
  }

  // Registry cycles of a call; the operands only give dtypes and counts.
  int64_t RegistryCycles(const std::string& kernel,
                         std::vector<DType> arg_dtypes,
                         std::vector<int64_t> params,
                         std::vector<float> fparams = {},
                         KernelPath path = KernelPath::kFast) {
    std::vector<Operand> args;
    for (DType d : arg_dtypes) args.push_back(Operand{nullptr, 0, d, 0});
    StatusOr<int64_t> c =
        Cycles(*model_, kernel, args, params, fparams, path);
    EXPECT_TRUE(c.ok()) << c.status().message();
    return c.ok() ? *c : -1;
  }

  std::optional<CostModel> model_;
};

// ---------------------------------------------------------------- gemm

// C = A * B in double from the stored (decoded) operands.
std::vector<double> GemmRef(const std::vector<float>& a,
                            const std::vector<float>& b, int64_t m, int64_t k,
                            int64_t n, const std::vector<float>* c0 = nullptr) {
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = c0 ? (*c0)[i * n + j] : 0.0;
      for (int64_t p = 0; p < k; ++p) s += double(a[i * k + p]) * b[p * n + j];
      c[i * n + j] = s;
    }
  }
  return c;
}

struct GemmCase {
  DType a, b, c;
  int a_scale, b_scale;
  int64_t m, k, n;
};

TEST_F(KernelsTest, GemmMatchesDoubleReference) {
  const GemmCase cases[] = {
      {DType::kF32, DType::kF32, DType::kF32, 0, 0, 7, 13, 21},
      {DType::kF32, DType::kF32, DType::kF32, 0, 0, 9, 40, 35},
      {DType::kF16, DType::kF16, DType::kF32, 0, 0, 12, 33, 48},
      {DType::kF16, DType::kF16, DType::kF16, 0, 0, 5, 17, 19},
      {DType::kFp8E4M3, DType::kFp8E4M3, DType::kF32, 4, 6, 82, 192, 160},
      {DType::kFp8E4M3, DType::kFp8E5M2, DType::kF32, 3, 2, 6, 31, 18},
      {DType::kFp8E5M2, DType::kFp8E5M2, DType::kF16, 0, 0, 3, 1, 5},
  };
  uint32_t seed = 1;
  for (const GemmCase& t : cases) {
    SCOPED_TRACE(std::string(DTypeName(t.a)) + " x " +
                 std::string(DTypeName(t.b)) + " -> " +
                 std::string(DTypeName(t.c)) + " M" + std::to_string(t.m) +
                 " K" + std::to_string(t.k) + " N" + std::to_string(t.n));
    auto a = RandomBuffer(t.a, t.m * t.k, seed++, 1.0f, t.a_scale);
    auto b = RandomBuffer(t.b, t.k * t.n, seed++, 0.1f, t.b_scale);
    Buffer c(t.c, t.m * t.n);
    // Garbage in C must be ignored without accumulate.
    c.Set(std::vector<float>(t.m * t.n, 1e4f));
    ASSERT_TRUE(Gemm(a->op, b->op, c.op, t.m, t.k, t.n, false).ok());
    const std::vector<double> want =
        GemmRef(a->Values(), b->Values(), t.m, t.k, t.n);
    // F32 accumulation error grows with the depth; scale by sum |a*b|.
    std::vector<double> tol_ref(want.size());
    const auto av = a->Values(), bv = b->Values();
    for (int64_t i = 0; i < t.m; ++i) {
      for (int64_t j = 0; j < t.n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < t.k; ++p) {
          s += std::fabs(double(av[i * t.k + p]) * bv[p * t.n + j]);
        }
        tol_ref[i * t.n + j] = s;
      }
    }
    const std::vector<float> got = c.Values();
    for (size_t i = 0; i < got.size(); ++i) {
      const double tol = 1e-6 * tol_ref[i] * std::sqrt(double(t.k)) +
                         Tolerance(t.c, want[i]);
      ASSERT_NEAR(got[i], want[i], tol) << "element " << i;
    }
  }
}

TEST_F(KernelsTest, GemmKSplitAccumulate) {
  // [M,K] x [K,N] as two K halves, the second accumulating into the first.
  const int64_t m = 10, k1 = 24, k2 = 17, n = 22;
  auto a1 = RandomBuffer(DType::kF16, m * k1, 11);
  auto a2 = RandomBuffer(DType::kF16, m * k2, 12);
  auto b1 = RandomBuffer(DType::kF16, k1 * n, 13);
  auto b2 = RandomBuffer(DType::kF16, k2 * n, 14);
  Buffer c(DType::kF32, m * n);
  ASSERT_TRUE(Gemm(a1->op, b1->op, c.op, m, k1, n, false).ok());
  ASSERT_TRUE(Gemm(a2->op, b2->op, c.op, m, k2, n, true).ok());

  // The whole product from the concatenated operands.
  std::vector<float> a(m * (k1 + k2)), b((k1 + k2) * n);
  const auto a1v = a1->Values(), a2v = a2->Values();
  const auto b1v = b1->Values(), b2v = b2->Values();
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < k1; ++p) a[i * (k1 + k2) + p] = a1v[i * k1 + p];
    for (int64_t p = 0; p < k2; ++p) {
      a[i * (k1 + k2) + k1 + p] = a2v[i * k2 + p];
    }
  }
  std::copy(b1v.begin(), b1v.end(), b.begin());
  std::copy(b2v.begin(), b2v.end(), b.begin() + k1 * n);
  const std::vector<double> want = GemmRef(a, b, m, k1 + k2, n);
  const std::vector<float> got = c.Values();
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-4) << i;
  }

  // F16 output accumulating: the previous F16 contents plus A*B, rounded
  // once.
  Buffer c16(DType::kF16, m * n);
  c16.Set(std::vector<float>(m * n, 0.5f));
  ASSERT_TRUE(Gemm(a1->op, b1->op, c16.op, m, k1, n, true).ok());
  const std::vector<float> start(m * n, 0.5f);
  ExpectNear(c16.Values(), GemmRef(a1v, b1v, m, k1, n, &start), DType::kF16);
}

// The blocked, vectorized GEMM must give exactly the bits of the plain loop
// it replaces: each C element starts from C (or 0), then adds one rounded
// F32 product per k in ascending order. Odd sizes exercise the edge blocks;
// depths past 256, heights past 72 and widths past 2048 cross the depth,
// row and column blocks.
TEST_F(KernelsTest, GemmIsBitIdenticalToAPlainLoop) {
  for (GemmPath path :
       {GemmPath::kFastest, GemmPath::kAvx2, GemmPath::kPortable}) {
    SCOPED_TRACE(path == GemmPath::kFastest ? "host's fastest path"
                 : path == GemmPath::kAvx2  ? "AVX2 path (or slower)"
                                            : "portable path");
    UseGemmPathForTesting(path);
    struct Case {
      DType in, out;
      int a_scale, b_scale;
      int64_t m, k, n;
      bool accumulate;
    };
    const Case cases[] = {
        {DType::kF16, DType::kF32, 0, 0, 37, 53, 29, false},
        {DType::kF16, DType::kF32, 0, 0, 37, 53, 29, true},
        {DType::kFp8E4M3, DType::kF32, 4, 6, 37, 53, 29, true},
        {DType::kFp8E5M2, DType::kF32, 0, 3, 37, 53, 29, false},
        {DType::kFp8E4M3, DType::kF16, 2, 5, 37, 53, 29, true},
        {DType::kF32, DType::kF32, 0, 0, 1, 1, 1, true},
        {DType::kF32, DType::kF32, 0, 0, 7, 13, 21, true},
        {DType::kF32, DType::kF32, 0, 0, 83, 517, 47, true},
        {DType::kF16, DType::kF32, 0, 0, 150, 300, 70, false},
        {DType::kFp8E4M3, DType::kF32, 4, 6, 82, 192, 160, true},
        // Past a column block (1024), past a depth block (768), and past
        // both at once.
        {DType::kF32, DType::kF32, 0, 0, 7, 300, 2100, true},
        {DType::kF16, DType::kF16, 0, 0, 5, 20, 2065, false},
        {DType::kFp8E4M3, DType::kF32, 4, 6, 13, 1700, 40, true},
        {DType::kF32, DType::kF32, 0, 0, 8, 1600, 1100, false},
    };
    uint32_t seed = 100;
    for (const Case& t : cases) {
      SCOPED_TRACE(std::string(DTypeName(t.in)) + " -> " +
                   std::string(DTypeName(t.out)) + " M" + std::to_string(t.m) +
                   " K" + std::to_string(t.k) + " N" + std::to_string(t.n) +
                   (t.accumulate ? " accumulate" : ""));
      auto a = RandomBuffer(t.in, t.m * t.k, seed++, 1.0f, t.a_scale);
      auto b = RandomBuffer(t.in, t.k * t.n, seed++, 0.1f, t.b_scale);
      Buffer c(t.out, t.m * t.n);
      c.Set(Random(t.m * t.n, seed++, 3.0f));
      const std::vector<float> av = a->Values(), bv = b->Values();
      const std::vector<float> c0 = c.Values();
      std::vector<float> want(t.m * t.n);
      for (int64_t i = 0; i < t.m; ++i) {
        for (int64_t j = 0; j < t.n; ++j) {
          float s = t.accumulate ? c0[i * t.n + j] : 0.0f;
          for (int64_t p = 0; p < t.k; ++p) {
            const float product = av[i * t.k + p] * bv[p * t.n + j];
            s += product;
          }
          want[i * t.n + j] = s;
        }
      }
      Buffer expected(t.out, t.m * t.n);
      expected.Set(want);
      ASSERT_TRUE(Gemm(a->op, b->op, c.op, t.m, t.k, t.n, t.accumulate).ok());
      for (size_t i = 0; i < c.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(c.At(i)),
                  std::bit_cast<uint32_t>(expected.At(i)))
            << "element " << i << ": got " << c.At(i) << ", want "
            << expected.At(i);
      }
    }
  }
  UseGemmPathForTesting(GemmPath::kFastest);
}

// A product split by columns (MultiplyF32Columns, as the reference splits
// its FP8 products among threads) is Gemm's, bit for bit, on every path:
// splits inside a panel, past a column block and a depth block, a split
// of one column, and columns outside the range left as they were.
TEST_F(KernelsTest, GemmColumnRangesAreGemmsColumns) {
  for (GemmPath path :
       {GemmPath::kFastest, GemmPath::kAvx2, GemmPath::kPortable}) {
    UseGemmPathForTesting(path);
    struct Case {
      int64_t m, k, n;
      std::vector<int64_t> cuts;  // the ranges' ends, the last n
    };
    const Case cases[] = {
        {37, 53, 29, {13, 29}},
        {7, 800, 2100, {5, 1030, 1031, 2100}},
        {73, 64, 40, {40}},
        {1, 1, 1, {1}},
    };
    uint32_t seed = 700;
    for (const Case& t : cases) {
      SCOPED_TRACE("M" + std::to_string(t.m) + " K" + std::to_string(t.k) +
                   " N" + std::to_string(t.n));
      auto a = RandomBuffer(DType::kFp8E4M3, t.m * t.k, seed++, 1.0f, 4);
      auto b = RandomBuffer(DType::kFp8E4M3, t.k * t.n, seed++, 0.1f, 6);
      const std::vector<float> av = a->Values(), bv = b->Values();
      Buffer whole(DType::kF32, t.m * t.n);
      ASSERT_TRUE(Gemm(a->op, b->op, whole.op, t.m, t.k, t.n, false).ok());
      // Garbage where the ranges will write, as a reused buffer holds.
      std::vector<float> split = Random(t.m * t.n, seed++, 5.0f);
      int64_t begin = 0;
      for (int64_t end : t.cuts) {
        MultiplyF32Columns(av.data(), bv.data(), split.data(), t.m, t.k, t.n,
                           begin, end, /*exact_products=*/true);
        begin = end;
      }
      size_t mismatches = 0;
      for (size_t i = 0; i < split.size(); ++i) {
        if (std::bit_cast<uint32_t>(split[i]) !=
            std::bit_cast<uint32_t>(whole.At(i))) {
          ++mismatches;
        }
      }
      EXPECT_EQ(mismatches, 0u);
      // A range leaves the other columns alone.
      std::vector<float> one(t.m * t.n, 7.0f);
      MultiplyF32Columns(av.data(), bv.data(), one.data(), t.m, t.k, t.n, 0,
                         t.n - 1, /*exact_products=*/true);
      for (int64_t i = 0; i < t.m; ++i) {
        EXPECT_EQ(one[i * t.n + t.n - 1], 7.0f);
      }
    }
  }
  UseGemmPathForTesting(GemmPath::kFastest);
}

// F32 operands are read in place and an F32 C accumulates in place, unless
// C shares bytes with A or B: then the product still reads A and B as they
// were before the call. Unaligned F32 operands take the decoding path.
TEST_F(KernelsTest, GemmInPlaceOperandsAliasingAndAlignment) {
  const int64_t m = 9, k = 20, n = 20;
  auto a = RandomBuffer(DType::kF32, m * k, 71);
  auto b = RandomBuffer(DType::kF32, k * n, 72);
  Buffer want(DType::kF32, m * n);
  want.Set(a->Values());
  ASSERT_TRUE(Gemm(a->op, b->op, want.op, m, k, n, true).ok());
  // C is A itself (k == n): A's old values are the accumulator's start and
  // the left operand.
  Buffer alias(DType::kF32, m * k);
  alias.Set(a->Values());
  ASSERT_TRUE(Gemm(alias.op, b->op, alias.op, m, k, n, true).ok());
  EXPECT_EQ(alias.bytes, want.bytes);
  // Every operand one byte off float alignment.
  const auto shifted = [](const Buffer& x) {
    auto y = std::make_unique<std::vector<uint8_t>>(x.bytes.size() + 1);
    std::copy(x.bytes.begin(), x.bytes.end(), y->begin() + 1);
    return y;
  };
  auto ua = shifted(*a), ub = shifted(*b), uc = shifted(*a);
  const Operand oa{ua->data() + 1, a->bytes.size(), DType::kF32, 0};
  const Operand ob{ub->data() + 1, b->bytes.size(), DType::kF32, 0};
  const Operand oc{uc->data() + 1, a->bytes.size(), DType::kF32, 0};
  ASSERT_TRUE(Gemm(oa, ob, oc, m, k, n, true).ok());
  EXPECT_TRUE(
      std::equal(want.bytes.begin(), want.bytes.end(), uc->begin() + 1));
}

TEST_F(KernelsTest, GemmRejectsBadOperands) {
  Buffer a(DType::kF16, 4 * 8), b(DType::kF16, 8 * 4), c(DType::kF32, 16);
  Buffer short_c(DType::kF32, 15), b8(DType::kFp8E4M3, 32);
  Buffer bf(DType::kBF16, 32), c8(DType::kFp8E4M3, 16);
  Status s = Gemm(a.op, b.op, short_c.op, 4, 8, 4, false);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s, "operand C needs 64 bytes")) << s.message();
  EXPECT_TRUE(Contains(s, "holds 60")) << s.message();
  s = Gemm(a.op, b8.op, c.op, 4, 8, 4, false);
  EXPECT_TRUE(Contains(s, "A is f16 but B is fp8e4m3")) << s.message();
  s = Gemm(bf.op, bf.op, c.op, 4, 8, 4, false);
  EXPECT_TRUE(Contains(s, "bf16")) << s.message();
  s = Gemm(a.op, b.op, c8.op, 4, 8, 4, false);
  EXPECT_TRUE(Contains(s, "output C")) << s.message();
  s = Gemm(a.op, b.op, c.op, -1, 8, 4, false);
  EXPECT_TRUE(Contains(s, "negative")) << s.message();
}

// ---------------------------------------------------------------- reduce

TEST_F(KernelsTest, ReducePartials) {
  const int64_t n = 37;
  std::vector<std::unique_ptr<Buffer>> parts;
  for (uint32_t p = 0; p < 3; ++p) {
    parts.push_back(RandomBuffer(DType::kF32, n, 100 + p));
  }
  std::vector<double> want(n, 0.0);
  for (const auto& p : parts) {
    const auto v = p->Values();
    for (int64_t i = 0; i < n; ++i) want[i] += v[i];
  }
  std::vector<Operand> ops = {parts[0]->op, parts[1]->op, parts[2]->op};
  for (DType out_dtype : {DType::kF32, DType::kF16}) {
    Buffer out(out_dtype, n);
    ASSERT_TRUE(ReducePartials(ops, out.op, n).ok());
    ExpectNear(out.Values(), want, out_dtype);
  }
  // In place into the first partial.
  ASSERT_TRUE(ReducePartials(ops, parts[0]->op, n).ok());
  ExpectNear(parts[0]->Values(), want, DType::kF32);
}

// ---------------------------------------------------------------- add

TEST_F(KernelsTest, AddAndBiasAddOddWidths) {
  for (int64_t w : {1, 3, 7, 8, 13}) {
    const int64_t rows = 3;
    auto a = RandomBuffer(DType::kF16, rows * w, 200 + w);
    auto b = RandomBuffer(DType::kF16, rows * w, 300 + w);
    auto bias = RandomBuffer(DType::kF16, w, 400 + w);
    const auto av = a->Values(), bv = b->Values(), biasv = bias->Values();
    for (DType out_dtype : {DType::kF16, DType::kF32}) {
      Buffer out(out_dtype, rows * w);
      ASSERT_TRUE(Add(a->op, b->op, out.op, rows, w).ok());
      std::vector<double> want(rows * w);
      for (size_t i = 0; i < want.size(); ++i) want[i] = double(av[i]) + bv[i];
      ExpectNear(out.Values(), want, out_dtype, 0, "add w" + std::to_string(w));

      ASSERT_TRUE(BiasAdd(a->op, bias->op, out.op, rows, w).ok());
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < w; ++c) {
          want[r * w + c] = double(av[r * w + c]) + biasv[c];
        }
      }
      ExpectNear(out.Values(), want, out_dtype, 0,
                 "bias_add w" + std::to_string(w));
    }
  }
}

TEST_F(KernelsTest, AddIsExactWhenRepresentable) {
  Buffer a(DType::kF16, 6), b(DType::kF16, 6), out(DType::kF16, 6);
  a.Set({1, 2, 3, -4, 0.5f, 1024});
  b.Set({0.25f, -2, 5, 4, 0.125f, 1});
  ASSERT_TRUE(Add(a.op, b.op, out.op, 2, 3).ok());
  EXPECT_EQ(out.Values(), (std::vector<float>{1.25f, 0, 8, 0, 0.625f, 1025}));
}

// ---------------------------------------------------------------- elementwise

// Each function as a plain double loop would compute it.
double UnaryRef(fb::ElementwiseFn fn, double x) {
  switch (fn) {
    case fb::ElementwiseFn::Sqrt:
      return std::sqrt(x);
    case fb::ElementwiseFn::Tanh:
      return std::tanh(x);
    case fb::ElementwiseFn::Erf:
      return std::erf(x);
    case fb::ElementwiseFn::Sigmoid:
      return 1 / (1 + std::exp(-x));
    case fb::ElementwiseFn::Relu:
      return x > 0 ? x : 0;
    default:
      ADD_FAILURE() << "not unary";
      return 0;
  }
}

double BinaryRef(fb::ElementwiseFn fn, double a, double b) {
  switch (fn) {
    case fb::ElementwiseFn::Add:
      return a + b;
    case fb::ElementwiseFn::Sub:
      return a - b;
    case fb::ElementwiseFn::Mul:
      return a * b;
    case fb::ElementwiseFn::Div:
      return a / b;
    case fb::ElementwiseFn::Pow:
      return std::pow(a, b);
    default:
      ADD_FAILURE() << "not binary";
      return 0;
  }
}

TEST_F(KernelsTest, UnaryFunctionsMatchAPlainLoop) {
  const int64_t rows = 3, w = 7;
  // Positive inputs so that sqrt is defined; relu gets both signs below.
  auto x = RandomBuffer(DType::kF16, rows * w, 610, 1.0f, 0, 2.0f);
  auto signed_x = RandomBuffer(DType::kF16, rows * w, 611, 2.0f);
  for (fb::ElementwiseFn fn :
       {fb::ElementwiseFn::Sqrt, fb::ElementwiseFn::Tanh,
        fb::ElementwiseFn::Erf, fb::ElementwiseFn::Sigmoid,
        fb::ElementwiseFn::Relu}) {
    const Buffer& in = fn == fb::ElementwiseFn::Sqrt ? *x : *signed_x;
    const auto xv = in.Values();
    for (DType out_dtype : {DType::kF16, DType::kF32}) {
      Buffer out(out_dtype, rows * w);
      ASSERT_TRUE(Unary(in.op, out.op, rows, w, fn).ok());
      std::vector<double> want(xv.size());
      for (size_t i = 0; i < xv.size(); ++i) want[i] = UnaryRef(fn, xv[i]);
      ExpectNear(out.Values(), want, out_dtype, 0,
                 fb::EnumNameElementwiseFn(fn));
    }
  }
  Buffer out(DType::kF16, rows * w);
  EXPECT_TRUE(Contains(
      Unary(x->op, out.op, rows, w, fb::ElementwiseFn::Mul), "Mul is binary"));
}

TEST_F(KernelsTest, BinaryFunctionsFullRowAndColumnBroadcastBothOrders) {
  const int64_t rows = 3, w = 5;
  // Positive bases for Pow; every other function takes them as well.
  auto x = RandomBuffer(DType::kF16, rows * w, 620, 0.5f, 0, 1.5f);
  auto y = RandomBuffer(DType::kF16, rows * w, 621, 0.5f, 0, 1.5f);
  auto row = RandomBuffer(DType::kF16, w, 622, 0.5f, 0, 1.5f);
  auto col = RandomBuffer(DType::kF16, rows, 623, 0.5f, 0, 1.5f);
  const auto xv = x->Values(), yv = y->Values(), rv = row->Values(),
             cv = col->Values();
  for (fb::ElementwiseFn fn :
       {fb::ElementwiseFn::Add, fb::ElementwiseFn::Sub, fb::ElementwiseFn::Mul,
        fb::ElementwiseFn::Div, fb::ElementwiseFn::Pow}) {
    for (fb::Broadcast broadcast :
         {fb::Broadcast::Full, fb::Broadcast::Row, fb::Broadcast::Column}) {
      for (bool operand_first : {false, true}) {
        const Buffer& other = broadcast == fb::Broadcast::Row      ? *row
                              : broadcast == fb::Broadcast::Column ? *col
                                                                   : *y;
        Buffer out(DType::kF32, rows * w);
        ASSERT_TRUE(Binary(x->op, other.op, out.op, rows, w, fn, operand_first,
                           broadcast)
                        .ok());
        // A plain loop over rows and columns.
        std::vector<double> want(xv.size());
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < w; ++c) {
            const size_t i = static_cast<size_t>(r * w + c);
            const double b = broadcast == fb::Broadcast::Row      ? rv[c]
                             : broadcast == fb::Broadcast::Column ? cv[r]
                                                                  : yv[i];
            want[i] = operand_first ? BinaryRef(fn, b, xv[i])
                                    : BinaryRef(fn, xv[i], b);
          }
        }
        ExpectNear(out.Values(), want, DType::kF32, 0,
                   std::string(fb::EnumNameElementwiseFn(fn)) + " " +
                       fb::EnumNameBroadcast(broadcast) +
                       (operand_first ? " swapped" : ""));
      }
    }
  }
  Buffer out(DType::kF16, rows * w);
  EXPECT_TRUE(
      Contains(Binary(x->op, y->op, out.op, rows, w, fb::ElementwiseFn::Erf,
                      false, fb::Broadcast::Full),
               "Erf is unary"));
  // binary_col reads one value per row: a shorter operand is refused.
  Buffer short_col(DType::kF16, rows - 1);
  Status wrong = Binary(x->op, short_col.op, out.op, rows, w,
                        fb::ElementwiseFn::Mul, false, fb::Broadcast::Column);
  EXPECT_TRUE(Contains(wrong, "binary_col")) << wrong.message();
  EXPECT_TRUE(Contains(wrong, "col")) << wrong.message();
}

// Through the registry, as the simulator runs it: each row's one value.
TEST_F(KernelsTest, BinaryColAppliesEachRowsValueAcrossTheRow) {
  Buffer x(DType::kF16, 6), col(DType::kF16, 2), out(DType::kF16, 6);
  x.Set({1, 2, 3, 4, 5, 6});
  col.Set({10, 0.5f});
  std::vector<Operand> args = {x.op, col.op, out.op};
  const int64_t sub_first[] = {2, 3, 1, 1};  // col - x
  ASSERT_TRUE(kernels::Run("binary_col", args, sub_first, {}).ok());
  EXPECT_EQ(out.Values(), (std::vector<float>{9, 8, 7, -3.5f, -4.5f, -5.5f}));
  const int64_t mul[] = {2, 3, 2, 0};
  ASSERT_TRUE(kernels::Run("binary_col", args, mul, {}).ok());
  EXPECT_EQ(out.Values(), (std::vector<float>{10, 20, 30, 2, 2.5f, 3}));
}

TEST_F(KernelsTest, ScaleMultipliesByItsFactor) {
  Buffer x(DType::kF16, 6), out(DType::kF16, 6);
  x.Set({1, -2, 3, 0.5f, 0, 1000});
  ASSERT_TRUE(ScaleKernel(x.op, out.op, 2, 3, 0.25f).ok());
  EXPECT_EQ(out.Values(), (std::vector<float>{0.25f, -0.5f, 0.75f, 0.125f, 0,
                                               250}));
  std::vector<Operand> args = {x.op, out.op};
  const int64_t params[] = {2, 3};
  const float fparams[] = {-1.0f};
  ASSERT_TRUE(kernels::Run("scale", args, params, fparams).ok());
  EXPECT_EQ(out.At(1), 2.0f);
}

TEST_F(KernelsTest, ElementwiseCyclesAreSumsOfTheAddAndGeluFormulas) {
  // n = rows * roundup(w, 4) = 2 * 12 = 24 on ipu21: add 200 + 4 * 6 = 224,
  // gelu 300 + 366 * ceil(24 / 96) = 666.
  const int64_t add = 224, gelu = 666;
  const DType h = DType::kF16;
  EXPECT_EQ(RegistryCycles("scale", {h, h}, {2, 10}, {3.0f}), add);
  EXPECT_EQ(RegistryCycles("unary", {h, h}, {2, 10, 9}), add);       // relu
  EXPECT_EQ(RegistryCycles("unary", {h, h}, {2, 10, 8}), gelu);      // sigmoid
  EXPECT_EQ(RegistryCycles("binary", {h, h, h}, {2, 10, 2, 0}), add);  // mul
  EXPECT_EQ(RegistryCycles("binary_row", {h, h, h}, {2, 10, 3, 1}),
            gelu + add);  // div
  // A column costs as a row: one operand value per group either way
  // (docs/lowering.md, "General elementwise kernels").
  EXPECT_EQ(RegistryCycles("binary_col", {h, h, h}, {2, 10, 3, 1}),
            gelu + add);  // div
  EXPECT_EQ(RegistryCycles("binary_col", {h, h, h}, {2, 10, 2, 0}), add);
  EXPECT_EQ(RegistryCycles("binary", {h, h, h}, {2, 10, 4, 0}),
            2 * gelu + add);  // pow
  // The slow path (inputs in one memory element) doubles add's term only.
  EXPECT_EQ(RegistryCycles("binary", {h, h, h}, {2, 10, 3, 0}, {},
                           KernelPath::kSlow),
            gelu + 200 + 2 * 4 * 6);
  std::vector<Operand> args(3, Operand{nullptr, 0, h, 0});
  const int64_t bad_fn[] = {2, 10, 10, 0};
  StatusOr<int64_t> c = Cycles(*model_, "binary", args, bad_fn, {});
  EXPECT_FALSE(c.ok());
  EXPECT_TRUE(Contains(c.status(), "unknown elementwise function 10"))
      << c.status().message();
}

// ---------------------------------------------------------------- gelu

TEST_F(KernelsTest, GeluForms) {
  const int64_t rows = 2, w = 11;
  auto x = RandomBuffer(DType::kF16, rows * w, 500, 2.0f);
  const auto xv = x->Values();
  for (GeluForm form : {GeluForm::kTanh, GeluForm::kErf, GeluForm::kQuick}) {
    Buffer out(DType::kF16, rows * w);
    ASSERT_TRUE(GeluKernel(x->op, out.op, rows, w, form).ok());
    std::vector<double> want(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) want[i] = GeluRef(xv[i], form);
    ExpectNear(out.Values(), want, DType::kF16, 0,
               "form " + std::to_string(static_cast<int>(form)));
  }
  // Known values: GELU(0) = 0; erf GELU(1) = 0.841344746.
  EXPECT_EQ(Gelu(0.0f, GeluForm::kTanh), 0.0f);
  EXPECT_NEAR(Gelu(1.0f, GeluForm::kErf), 0.8413447460685429, 1e-6);
  EXPECT_NEAR(Gelu(1.0f, GeluForm::kTanh), 0.8411919906082768, 1e-6);
  EXPECT_NEAR(Gelu(-3.0f, GeluForm::kQuick), -3.0 / (1 + std::exp(5.106)),
              1e-6);
}

// GeluKernel looks up F16 inputs (and F32 inputs that are F16 values) in
// a table of Gelu's own results: every F16 pattern, NaNs and infinities
// included, gives exactly Gelu's bits, and F32 values between F16 values
// are computed.
TEST_F(KernelsTest, GeluKernelIsGeluBitForBit) {
  constexpr size_t kPatterns = size_t{1} << 16;
  Buffer halves(DType::kF16, kPatterns);
  for (size_t i = 0; i < kPatterns; ++i) {
    halves.bytes[2 * i] = static_cast<uint8_t>(i);
    halves.bytes[2 * i + 1] = static_cast<uint8_t>(i >> 8);
  }
  std::vector<float> values = halves.Values();
  const std::vector<float> between = Random(4096, 700, 3.0f);
  values.insert(values.end(), between.begin(), between.end());
  Buffer floats(DType::kF32, values.size());
  floats.Set(values);
  auto bits = [](float f) { return std::bit_cast<uint32_t>(f); };
  for (GeluForm form : {GeluForm::kTanh, GeluForm::kErf, GeluForm::kQuick}) {
    const std::string name = "form " + std::to_string(static_cast<int>(form));
    Buffer from_halves(DType::kF32, kPatterns);
    ASSERT_TRUE(GeluKernel(halves.op, from_halves.op, 1, kPatterns, form).ok());
    Buffer from_floats(DType::kF32, values.size());
    ASSERT_TRUE(
        GeluKernel(floats.op, from_floats.op, 1, values.size(), form).ok());
    size_t mismatches = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      const uint32_t want = bits(Gelu(values[i], form));
      if (i < kPatterns && bits(from_halves.At(i)) != want) ++mismatches;
      if (bits(from_floats.At(i)) != want) ++mismatches;
    }
    EXPECT_EQ(mismatches, 0u) << name;
  }
}

TEST_F(KernelsTest, BiasGeluF16AndFp8) {
  const int64_t rows = 3, w = 10;
  auto x = RandomBuffer(DType::kF16, rows * w, 600, 2.0f);
  auto bias = RandomBuffer(DType::kF16, w, 601, 0.5f);
  const auto xv = x->Values(), bv = bias->Values();
  std::vector<double> want(rows * w);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < w; ++c) {
      want[r * w + c] =
          GeluRef(double(xv[r * w + c]) + bv[c], GeluForm::kTanh);
    }
  }
  Buffer out16(DType::kF16, rows * w);
  ASSERT_TRUE(
      BiasGelu(x->op, bias->op, out16.op, rows, w, GeluForm::kTanh).ok());
  ExpectNear(out16.Values(), want, DType::kF16);

  for (DType fp8 : {DType::kFp8E4M3, DType::kFp8E5M2}) {
    const int scale = 5;
    Buffer out8(fp8, rows * w, scale);
    ASSERT_TRUE(
        BiasGelu(x->op, bias->op, out8.op, rows, w, GeluForm::kTanh).ok());
    ExpectNear(out8.Values(), want, fp8, scale, std::string(DTypeName(fp8)));
  }
}

// ---------------------------------------------------------------- cast

TEST_F(KernelsTest, CastRoundsOnceIntoTheOutputFormat) {
  const int64_t rows = 3, w = 7;
  auto f32 = RandomBuffer(DType::kF32, rows * w, 700, 3.0f);
  const auto x = f32->Values();
  // F32 -> every format: equal to the numerics library's single rounding.
  for (DType to : {DType::kF16, DType::kBF16, DType::kFp8E4M3,
                   DType::kFp8E5M2}) {
    const int scale = (to == DType::kFp8E4M3) ? 4 : 0;
    Buffer out(to, rows * w, scale);
    ASSERT_TRUE(Cast(f32->op, out.op, rows, w).ok());
    for (size_t i = 0; i < x.size(); ++i) {
      std::vector<uint8_t> expect(DTypeBytes(to));
      StoreAs(to, x[i], scale, expect.data());
      ASSERT_EQ(out.At(i), LoadAs(to, expect.data(), scale))
          << DTypeName(to) << " element " << i;
    }
    // And back to F32 exactly.
    Buffer back(DType::kF32, rows * w);
    ASSERT_TRUE(Cast(out.op, back.op, rows, w).ok());
    EXPECT_EQ(back.Values(), out.Values());
  }
  // F16 -> FP8 with scale, the MLP cast: saturates at 448 * 2^-scale.
  Buffer h(DType::kF16, 4), q(DType::kFp8E4M3, 4, 2);
  h.Set({1.0f, 200.0f, -0.03125f, 1000.0f});
  ASSERT_TRUE(Cast(h.op, q.op, 1, 4).ok());
  EXPECT_EQ(q.Values(), (std::vector<float>{1.0f, 112.0f, -0.03125f, 112.0f}));
}

// ---------------------------------------------------------------- layernorm

// Row-wise LayerNorm in double.
std::vector<double> LayerNormRef(const std::vector<float>& x,
                                 const std::vector<float>& g,
                                 const std::vector<float>& b, int64_t rows,
                                 int64_t w, double eps) {
  std::vector<double> y(rows * w);
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < w; ++c) mean += x[r * w + c];
    mean /= w;
    for (int64_t c = 0; c < w; ++c) {
      var += (x[r * w + c] - mean) * (x[r * w + c] - mean);
    }
    var /= w;
    for (int64_t c = 0; c < w; ++c) {
      y[r * w + c] = (x[r * w + c] - mean) / std::sqrt(var + eps) * g[c] + b[c];
    }
  }
  return y;
}

TEST_F(KernelsTest, LayerNormF16AndFp8) {
  const float eps = 1e-6f;
  for (int64_t w : {5, 64, 1152}) {
    const int64_t rows = 3;
    // A large mean tests the two-pass variance.
    auto x = RandomBuffer(DType::kF16, rows * w, 800 + w, 2.0f, 0, 30.0f);
    auto gamma = RandomBuffer(DType::kF16, w, 801, 0.2f, 0, 1.0f);
    auto beta = RandomBuffer(DType::kF16, w, 802, 0.1f);
    const std::vector<double> want = LayerNormRef(
        x->Values(), gamma->Values(), beta->Values(), rows, w, eps);
    Buffer out(DType::kF16, rows * w);
    ASSERT_TRUE(
        LayerNorm(x->op, gamma->op, beta->op, out.op, rows, w, eps).ok());
    // F32 statistics of rows with mean 30 leave ~1e-6 absolute error.
    ExpectNear(out.Values(), want, DType::kF16, 0,
               "layernorm w" + std::to_string(w), 1e-5);
    Buffer out8(DType::kFp8E4M3, rows * w, 3);
    ASSERT_TRUE(
        LayerNorm(x->op, gamma->op, beta->op, out8.op, rows, w, eps).ok());
    ExpectNear(out8.Values(), want, DType::kFp8E4M3, 3,
               "layernorm fp8 w" + std::to_string(w), 1e-5);
  }
}

// ---------------------------------------------------------------- moments

TEST_F(KernelsTest, MomentsOfSlicesCombineToWholeRowMoments) {
  const int64_t rows = 4;
  const int64_t widths[] = {5, 8, 10, 1};  // column slices of a 24-wide row
  const int64_t w = 24;
  auto x = RandomBuffer(DType::kF16, rows * w, 900, 3.0f, 0, 10.0f);
  const auto xv = x->Values();

  // Each slice copied out as its own [rows, w_s] buffer, as on its tile.
  std::vector<std::unique_ptr<Buffer>> slices, moments;
  int64_t col = 0;
  for (int64_t ws : widths) {
    auto s = std::make_unique<Buffer>(DType::kF16, rows * ws);
    std::vector<float> v(rows * ws);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < ws; ++c) v[r * ws + c] = xv[r * w + col + c];
    }
    s->Set(v);
    auto m = std::make_unique<Buffer>(DType::kF32, rows * kMomentFloats);
    ASSERT_TRUE(LnMoments(s->op, m->op, rows, ws).ok());
    slices.push_back(std::move(s));
    moments.push_back(std::move(m));
    col += ws;
  }
  std::vector<Operand> parts;
  for (const auto& m : moments) parts.push_back(m->op);
  Buffer combined(DType::kF32, rows * kMomentFloats);
  ASSERT_TRUE(CombineMoments(parts, combined.op, rows).ok());

  Buffer whole(DType::kF32, rows * kMomentFloats);
  ASSERT_TRUE(LnMoments(x->op, whole.op, rows, w).ok());
  const auto cv = combined.Values(), wv = whole.Values();
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, m2 = 0;
    for (int64_t c = 0; c < w; ++c) mean += xv[r * w + c];
    mean /= w;
    for (int64_t c = 0; c < w; ++c) {
      m2 += (xv[r * w + c] - mean) * (xv[r * w + c] - mean);
    }
    const float* got = cv.data() + r * kMomentFloats;
    EXPECT_EQ(got[0], 24.0f);
    EXPECT_NEAR(got[1], mean, 1e-5 * std::fabs(mean));
    EXPECT_NEAR(got[2], m2, 1e-5 * m2);
    // The same as the moments of the whole row.
    EXPECT_EQ(wv[r * kMomentFloats], 24.0f);
    EXPECT_NEAR(got[1], wv[r * kMomentFloats + 1], 1e-5 * std::fabs(mean));
    EXPECT_NEAR(got[2], wv[r * kMomentFloats + 2], 1e-5 * m2);
  }

  // In place into the first partial, with an empty set in between.
  Buffer empty(DType::kF32, rows * kMomentFloats);
  std::vector<Operand> with_empty = {moments[0]->op, empty.op, moments[1]->op,
                                     moments[2]->op, moments[3]->op};
  ASSERT_TRUE(CombineMoments(with_empty, moments[0]->op, rows).ok());
  EXPECT_EQ(moments[0]->Values(), cv);
}

TEST_F(KernelsTest, NormalizeFromMomentsEqualsLayerNorm) {
  const int64_t rows = 3, w = 30;
  const int64_t widths[] = {7, 12, 11};
  const float eps = 1e-6f;
  auto x = RandomBuffer(DType::kF16, rows * w, 1000, 2.0f, 0, 5.0f);
  auto gamma = RandomBuffer(DType::kF16, w, 1001, 0.2f, 0, 1.0f);
  auto beta = RandomBuffer(DType::kF16, w, 1002, 0.1f);
  Buffer direct(DType::kF16, rows * w);
  ASSERT_TRUE(
      LayerNorm(x->op, gamma->op, beta->op, direct.op, rows, w, eps).ok());
  const auto xv = x->Values(), gv = gamma->Values(), bv = beta->Values();
  const auto dv = direct.Values();
  const std::vector<double> want = LayerNormRef(xv, gv, bv, rows, w, eps);

  // Partial moments per slice, combined, then each slice normalized.
  std::vector<std::unique_ptr<Buffer>> xs, gs, bs, ms;
  int64_t col = 0;
  for (int64_t ws : widths) {
    std::vector<float> v(rows * ws), g(ws), b(ws);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < ws; ++c) v[r * ws + c] = xv[r * w + col + c];
    }
    for (int64_t c = 0; c < ws; ++c) g[c] = gv[col + c], b[c] = bv[col + c];
    xs.push_back(std::make_unique<Buffer>(DType::kF16, rows * ws));
    gs.push_back(std::make_unique<Buffer>(DType::kF16, ws));
    bs.push_back(std::make_unique<Buffer>(DType::kF16, ws));
    ms.push_back(std::make_unique<Buffer>(DType::kF32, rows * kMomentFloats));
    xs.back()->Set(v), gs.back()->Set(g), bs.back()->Set(b);
    ASSERT_TRUE(LnMoments(xs.back()->op, ms.back()->op, rows, ws).ok());
    col += ws;
  }
  Buffer stats(DType::kF32, rows * kMomentFloats);
  std::vector<Operand> parts = {ms[0]->op, ms[1]->op, ms[2]->op};
  ASSERT_TRUE(CombineMoments(parts, stats.op, rows).ok());
  col = 0;
  for (size_t s = 0; s < xs.size(); ++s) {
    const int64_t ws = widths[s];
    Buffer out(DType::kF16, rows * ws);
    ASSERT_TRUE(Normalize(xs[s]->op, stats.op, gs[s]->op, bs[s]->op, out.op,
                          rows, ws, eps)
                    .ok());
    const auto ov = out.Values();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < ws; ++c) {
        const double ref = want[r * w + col + c];
        const float direct_value = dv[r * w + col + c];
        // Within F16 rounding of the double reference, and at most one F16
        // step away from the direct LayerNorm (plus the F32 error of a mean
        // near 5, which only shows on results near zero).
        ASSERT_NEAR(ov[r * ws + c], ref, Tolerance(DType::kF16, ref) + 1e-5);
        ASSERT_LE(std::fabs(ov[r * ws + c] - direct_value),
                  std::ldexp(std::fabs(direct_value), -10) + 1e-5);
      }
    }
    col += ws;
  }

  // A row without any elements has no variance.
  Buffer zero(DType::kF32, rows * kMomentFloats), out(DType::kF16, rows * 7);
  Status s = Normalize(xs[0]->op, zero.op, gs[0]->op, bs[0]->op, out.op,
                       rows, 7, eps);
  EXPECT_TRUE(Contains(s, "count")) << s.message();
}

TEST_F(KernelsTest, ResidualMomentsMatchesAddThenMoments) {
  const int64_t rows = 2, w = 13;
  auto a = RandomBuffer(DType::kF16, rows * w, 1100, 2.0f);
  auto b = RandomBuffer(DType::kF16, rows * w, 1101, 2.0f);
  Buffer sum(DType::kF16, rows * w), moments(DType::kF32, rows * 3);
  ASSERT_TRUE(ResidualMoments(a->op, b->op, sum.op, moments.op, rows, w).ok());
  Buffer sum2(DType::kF16, rows * w), moments2(DType::kF32, rows * 3);
  ASSERT_TRUE(Add(a->op, b->op, sum2.op, rows, w).ok());
  ASSERT_TRUE(LnMoments(sum2.op, moments2.op, rows, w).ok());
  EXPECT_EQ(sum.bytes, sum2.bytes);
  EXPECT_EQ(moments.Values(), moments2.Values());
}

// ---------------------------------------------------------------- softmax

TEST_F(KernelsTest, ScaledSoftmax) {
  const int64_t rows = 3, w = 13;
  const float scale = 0.125f;
  auto x = RandomBuffer(DType::kF16, rows * w, 1200, 20.0f);
  const auto xv = x->Values();
  Buffer out(DType::kF16, rows * w);
  ASSERT_TRUE(Softmax(x->op, out.op, rows, w, scale).ok());
  std::vector<double> want(rows * w);
  for (int64_t r = 0; r < rows; ++r) {
    double max = -1e300, sum = 0;
    for (int64_t c = 0; c < w; ++c) max = std::max(max, double(xv[r * w + c]));
    for (int64_t c = 0; c < w; ++c) {
      sum += std::exp(scale * (xv[r * w + c] - max));
    }
    for (int64_t c = 0; c < w; ++c) {
      want[r * w + c] = std::exp(scale * (xv[r * w + c] - max)) / sum;
    }
  }
  ExpectNear(out.Values(), want, DType::kF16);
  // Large logits do not overflow.
  Buffer big(DType::kF16, 2), p(DType::kF16, 2);
  big.Set({60000.0f, 59000.0f});
  ASSERT_TRUE(Softmax(big.op, p.op, 1, 2, 1.0f).ok());
  EXPECT_EQ(p.Values(), (std::vector<float>{1.0f, 0.0f}));
}

TEST_F(KernelsTest, SoftmaxOverColumnSlicesEqualsCompleteRows) {
  // Rows of 13 split 5 + 8: each slice's state, the two states combined in
  // slice order, each slice normalized. The maximum is exact; only the
  // order of the denominator's sum differs, well inside one F16 step.
  const int64_t rows = 4, w = 13, w0 = 5, w1 = w - w0;
  const float scale = 0.3f;
  auto x = RandomBuffer(DType::kF16, rows * w, 1300, 8.0f);
  const std::vector<float> xv = x->Values();
  Buffer whole(DType::kF16, rows * w);
  ASSERT_TRUE(Softmax(x->op, whole.op, rows, w, scale).ok());
  Buffer a(DType::kF16, rows * w0), b(DType::kF16, rows * w1);
  std::vector<float> av, bv;
  for (int64_t r = 0; r < rows; ++r) {
    av.insert(av.end(), xv.begin() + r * w, xv.begin() + r * w + w0);
    bv.insert(bv.end(), xv.begin() + r * w + w0, xv.begin() + (r + 1) * w);
  }
  a.Set(av);
  b.Set(bv);
  Buffer sa(DType::kF32, rows * 2), sb(DType::kF32, rows * 2),
      s(DType::kF32, rows * 2);
  ASSERT_TRUE(SoftmaxState(a.op, sa.op, rows, w0, scale).ok());
  ASSERT_TRUE(SoftmaxState(b.op, sb.op, rows, w1, scale).ok());
  const std::vector<Operand> states = {sa.op, sb.op};
  ASSERT_TRUE(CombineSoftmaxStates(states, s.op, rows).ok());
  Buffer pa(DType::kF16, rows * w0), pb(DType::kF16, rows * w1);
  ASSERT_TRUE(SoftmaxNormalize(a.op, s.op, pa.op, rows, w0, scale).ok());
  ASSERT_TRUE(SoftmaxNormalize(b.op, s.op, pb.op, rows, w1, scale).ok());
  const std::vector<float> wv = whole.Values(), pav = pa.Values(),
                           pbv = pb.Values();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < w; ++c) {
      const float got = c < w0 ? pav[r * w0 + c] : pbv[r * w1 + c - w0];
      EXPECT_NEAR(got, wv[r * w + c], 1e-3f + 1e-3f * wv[r * w + c])
          << r << "," << c;
    }
  }
}

TEST_F(KernelsTest, GemmNtIsTheScaledProductWithTheTranspose) {
  // Bit for bit what the reference computes for attention scores: the F32
  // product of A and B^T, times the scale in F32, rounded once.
  const int64_t m = 5, k = 7, n = 6;
  const float scale = 0.117851f;
  auto a = RandomBuffer(DType::kF16, m * k, 1400);
  auto b = RandomBuffer(DType::kF16, n * k, 1401);
  const std::vector<float> bv = b->Values();
  Buffer bt(DType::kF16, k * n);
  std::vector<float> t(k * n);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < k; ++j) t[j * n + i] = bv[i * k + j];
  }
  bt.Set(t);
  Buffer product(DType::kF32, m * n);
  ASSERT_TRUE(Gemm(a->op, bt.op, product.op, m, k, n, false).ok());
  std::vector<float> want = product.Values();
  for (float& v : want) v *= scale;
  Buffer expected(DType::kF16, m * n), got(DType::kF16, m * n);
  expected.Set(want);
  ASSERT_TRUE(GemmNt(a->op, b->op, got.op, m, k, n, false, scale).ok());
  EXPECT_EQ(got.Values(), expected.Values());
}

// ---------------------------------------------------------------- copy

TEST_F(KernelsTest, CopyBytesWithOverlap) {
  Buffer buf(DType::kFp8E4M3, 16);
  for (int i = 0; i < 16; ++i) buf.bytes[i] = static_cast<uint8_t>(i);
  Operand src = buf.op, dst = buf.op;
  dst.data += 3;
  dst.bytes -= 3;
  ASSERT_TRUE(Copy(src, dst, 10).ok());
  const std::vector<uint8_t> want = {0, 1, 2, 0, 1, 2, 3, 4,
                                     5, 6, 7, 8, 9, 13, 14, 15};
  EXPECT_EQ(buf.bytes, want);
  Status s = Copy(src, dst, 14);
  EXPECT_TRUE(Contains(s, "dst needs 14 bytes but holds 13")) << s.message();
}

// ---------------------------------------------------------------- registry

TEST_F(KernelsTest, RegistryCyclesForKnownShapes) {
  using D = DType;
  // gemm_fp8 M82 K192 N160: 294 + 6*10*(4*82 + 160).
  EXPECT_EQ(RegistryCycles("gemm", {D::kFp8E4M3, D::kFp8E4M3, D::kF32},
                           {82, 192, 160, 0}),
            29574);
  // gemm_fp8 M122 K160 N128: 294 + 5*8*(4*122 + 160).
  EXPECT_EQ(RegistryCycles("gemm", {D::kFp8E5M2, D::kFp8E5M2, D::kF32},
                           {122, 160, 128, 1}),
            26214);
  // gemm_f16: 294 + 12*10*488; gemm_f32: 294 + 24*10*488.
  EXPECT_EQ(RegistryCycles("gemm", {D::kF16, D::kF16, D::kF32},
                           {82, 192, 160, 0}),
            58854);
  EXPECT_EQ(RegistryCycles("gemm", {D::kF32, D::kF32, D::kF32},
                           {82, 192, 160, 0}),
            117414);
  // reduce 6 partials of 2624: 282 + 6*55*(11 + 10).
  EXPECT_EQ(RegistryCycles("reduce_partials",
                           {D::kF32, D::kF32, D::kF32, D::kF32, D::kF32,
                            D::kF32, D::kF16},
                           {2624}),
            7212);
  // bias add 1x1152: 200 + 288*4; slow path 200 + 2*1152.
  EXPECT_EQ(RegistryCycles("bias_add", {D::kF16, D::kF16, D::kF16},
                           {1, 1152}),
            1352);
  EXPECT_EQ(RegistryCycles("add", {D::kF16, D::kF16, D::kF16}, {1, 1152}, {},
                           KernelPath::kSlow),
            2504);
  // bias + GELU 1x2152: 480 + 15*538; FP8 out: 480 + 25*538.
  EXPECT_EQ(RegistryCycles("bias_gelu", {D::kF32, D::kF16, D::kF16},
                           {1, 2152, 0}),
            8550);
  EXPECT_EQ(RegistryCycles("bias_gelu", {D::kF32, D::kF16, D::kFp8E4M3},
                           {1, 2152, 0}),
            13930);
  // GELU 1x1152: 300 + 366*12.
  EXPECT_EQ(RegistryCycles("gelu", {D::kF16, D::kF16}, {1, 1152, 0}), 4692);
  // cast 1x2132: 200 + 10*533.
  EXPECT_EQ(RegistryCycles("cast", {D::kF16, D::kFp8E4M3}, {1, 2132}), 5530);
  // LayerNorm 1x1152: 300 + 48 + 11*576; FP8 out: 1.06 * 6684 = 7085.04.
  EXPECT_EQ(RegistryCycles("layernorm", {D::kF16, D::kF16, D::kF16, D::kF16},
                           {1, 1152}, {1e-6f}),
            6684);
  EXPECT_EQ(RegistryCycles("layernorm",
                           {D::kF16, D::kF16, D::kF16, D::kFp8E4M3}, {1, 1152},
                           {1e-6f}),
            7086);
  // Moments 1x1152: 150 + 24 + 6*576; residual fused: 250 + 40 + 7*576.
  EXPECT_EQ(RegistryCycles("ln_moments", {D::kF16, D::kF32}, {1, 1152}), 3630);
  EXPECT_EQ(RegistryCycles("residual_moments",
                           {D::kF16, D::kF16, D::kF16, D::kF32}, {1, 1152}),
            4322);
  // Combine 6 partials of 10 rows: 150 + 12*10*6.
  EXPECT_EQ(RegistryCycles("moments_combine",
                           std::vector<DType>(7, D::kF32), {10}),
            870);
  // Normalize 3x192: 300 + 3*(24 + 5*96); FP8: ceil(1.06 * 1812).
  EXPECT_EQ(RegistryCycles("normalize",
                           {D::kF16, D::kF32, D::kF16, D::kF16, D::kF16},
                           {3, 192}, {1e-6f}),
            1812);
  EXPECT_EQ(RegistryCycles("normalize",
                           {D::kF16, D::kF32, D::kF16, D::kF16, D::kFp8E4M3},
                           {3, 192}, {1e-6f}),
            1921);
  // Softmax 2x729: 300 + ceil(2/6)*(100 + 34*365); FP8 out x 1.11.
  EXPECT_EQ(RegistryCycles("softmax", {D::kF16, D::kF16}, {2, 729}, {0.125f}),
            12810);
  EXPECT_EQ(
      RegistryCycles("softmax", {D::kF16, D::kFp8E4M3}, {2, 729}, {0.125f}),
      14220);
  // The split-row kernels: the state as LayerNorm partial moments
  // (150 + 2*(24 + 6*365)), the normalization as the softmax.
  EXPECT_EQ(RegistryCycles("softmax_state", {D::kF16, D::kF32}, {2, 729},
                           {0.125f}),
            150 + 2 * (24 + 6 * 365));
  EXPECT_EQ(RegistryCycles("softmax_normalize",
                           {D::kF16, D::kF32, D::kF16}, {2, 729}, {0.125f}),
            12810);
  // gemm_nt is charged the GEMM formula of A's dtype.
  EXPECT_EQ(RegistryCycles("gemm_nt", {D::kF16, D::kF16, D::kF16},
                           {8, 72, 183, 0}, {0.125f}),
            294 + 5 * 12 * (4 * 8 + 160));
  // copy 1000 B: 288 + 125.
  EXPECT_EQ(RegistryCycles("copy", {D::kF16, D::kF16}, {1000}), 413);
}

TEST_F(KernelsTest, TailCostForRowsThatAreNotWholeGroups) {
  using D = DType;
  // 3 rows of 7 are charged as 3 rows of 8: add 200 + 4*ceil(24/4).
  EXPECT_EQ(RegistryCycles("add", {D::kF16, D::kF16, D::kF16}, {3, 7}), 224);
  // 5 rows of 3 are charged as 20 elements: 200 + 4*5 = 220 (15 untailed
  // elements would be 200 + 4*4).
  EXPECT_EQ(RegistryCycles("bias_add", {D::kF16, D::kF16, D::kF16}, {5, 3}),
            220);
  // bias_gelu 2 x 10 -> 2 x 12: 480 + 15*6.
  EXPECT_EQ(RegistryCycles("bias_gelu", {D::kF32, D::kF16, D::kF16},
                           {2, 10, 0}),
            570);
  // bias_gelu_fp8 2 x 10 -> 24: 480 + 25*6.
  EXPECT_EQ(RegistryCycles("bias_gelu", {D::kF32, D::kF16, D::kFp8E4M3},
                           {2, 10, 0}),
            630);
  // gelu 33 rows of 3 -> 132 elements: 300 + 366*ceil(132/96) = 300 + 732.
  // 25 rows of 3 -> 100 charged elements, also 2 blocks, although the 75
  // real elements would fit in one (300 + 366).
  EXPECT_EQ(RegistryCycles("gelu", {D::kF16, D::kF16}, {33, 3, 0}), 1032);
  EXPECT_EQ(RegistryCycles("gelu", {D::kF16, D::kF16}, {25, 3, 0}), 1032);
  // cast 2 x 1023 -> 2 x 1024: 200 + 10*512.
  EXPECT_EQ(RegistryCycles("cast", {D::kF16, D::kFp8E4M3}, {2, 1023}), 5320);
}

TEST_F(KernelsTest, RegistryRunsKernels) {
  // gemm through the registry equals the direct call.
  const int64_t m = 5, k = 9, n = 6;
  auto a = RandomBuffer(DType::kFp8E4M3, m * k, 1300, 1.0f, 4);
  auto b = RandomBuffer(DType::kFp8E4M3, k * n, 1301, 1.0f, 4);
  Buffer c1(DType::kF32, m * n), c2(DType::kF32, m * n);
  std::vector<Operand> args = {a->op, b->op, c1.op};
  const int64_t params[] = {m, k, n, 0};
  ASSERT_TRUE(kernels::Run("gemm", args, params, {}).ok());
  ASSERT_TRUE(Gemm(a->op, b->op, c2.op, m, k, n, false).ok());
  EXPECT_EQ(c1.bytes, c2.bytes);

  // layernorm with its eps.
  auto x = RandomBuffer(DType::kF16, 2 * 6, 1302);
  auto g = RandomBuffer(DType::kF16, 6, 1303);
  auto be = RandomBuffer(DType::kF16, 6, 1304);
  Buffer y1(DType::kF16, 12), y2(DType::kF16, 12);
  std::vector<Operand> ln = {x->op, g->op, be->op, y1.op};
  const int64_t ln_params[] = {2, 6};
  const float eps[] = {1e-5f};
  ASSERT_TRUE(kernels::Run("layernorm", ln, ln_params, eps).ok());
  ASSERT_TRUE(LayerNorm(x->op, g->op, be->op, y2.op, 2, 6, 1e-5f).ok());
  EXPECT_EQ(y1.bytes, y2.bytes);

  // reduce_partials: partials first, out last.
  auto p0 = RandomBuffer(DType::kF32, 4, 1305);
  auto p1 = RandomBuffer(DType::kF32, 4, 1306);
  Buffer r(DType::kF32, 4);
  std::vector<Operand> red = {p0->op, p1->op, r.op};
  const int64_t red_params[] = {4};
  ASSERT_TRUE(kernels::Run("reduce_partials", red, red_params, {}).ok());
  for (int i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(r.At(i), p0->At(i) + p1->At(i));
  }
}

TEST_F(KernelsTest, RegistryErrors) {
  Buffer a(DType::kF16, 12), b(DType::kF16, 12), out(DType::kF16, 12);
  Buffer short_out(DType::kF16, 11);
  const int64_t params[] = {3, 4};

  std::vector<Operand> args = {a.op, b.op, out.op};
  Status s = kernels::Run("matmul", args, params, {});
  EXPECT_TRUE(Contains(s, "unknown kernel 'matmul'")) << s.message();
  EXPECT_TRUE(Contains(s, "gemm")) << s.message();
  StatusOr<int64_t> c = Cycles(*model_, "matmul", args, params, {});
  EXPECT_FALSE(c.ok());

  std::vector<Operand> short_args = {a.op, b.op, short_out.op};
  s = kernels::Run("add", short_args, params, {});
  EXPECT_TRUE(Contains(s, "add: operand out needs 24 bytes")) << s.message();
  EXPECT_TRUE(Contains(s, "holds 22")) << s.message();

  // The short bias row of a bias add.
  Buffer bias(DType::kF16, 3);
  std::vector<Operand> bias_args = {a.op, bias.op, out.op};
  s = kernels::Run("bias_add", bias_args, params, {});
  EXPECT_TRUE(Contains(s, "operand bias needs 8 bytes")) << s.message();

  // Counts.
  std::vector<Operand> two = {a.op, out.op};
  s = kernels::Run("add", two, params, {});
  EXPECT_TRUE(Contains(s, "expects 3 args")) << s.message();
  const int64_t one_param[] = {3};
  s = kernels::Run("add", args, one_param, {});
  EXPECT_TRUE(Contains(s, "expects 2 params (rows w)")) << s.message();
  s = kernels::Run("layernorm", args, params, {});
  EXPECT_TRUE(Contains(s, "expects 4 args")) << s.message();
  std::vector<Operand> four = {a.op, a.op, a.op, out.op};
  s = kernels::Run("layernorm", four, params, {});
  EXPECT_TRUE(Contains(s, "expects 1 fparams (eps)")) << s.message();
  std::vector<Operand> one = {out.op};
  const int64_t n_param[] = {12};
  s = kernels::Run("reduce_partials", one, n_param, {});
  EXPECT_TRUE(Contains(s, "expects at least 2 args")) << s.message();

  // Ranges.
  const int64_t negative[] = {-3, 4};
  s = kernels::Run("add", args, negative, {});
  EXPECT_TRUE(Contains(s, "negative")) << s.message();
  Buffer gm(DType::kF32, 4);
  std::vector<Operand> gemm_args = {gm.op, gm.op, gm.op};
  const int64_t bad_accumulate[] = {2, 2, 2, 2};
  s = kernels::Run("gemm", gemm_args, bad_accumulate, {});
  EXPECT_TRUE(Contains(s, "accumulate is 2")) << s.message();
  const int64_t bad_form[] = {3, 4, 7};
  std::vector<Operand> gelu_args = {a.op, out.op};
  s = kernels::Run("gelu", gelu_args, bad_form, {});
  EXPECT_TRUE(Contains(s, "unknown GELU form 7")) << s.message();

  // A huge shape is an error, not an overflowed size.
  const int64_t huge[] = {int64_t{1} << 40, int64_t{1} << 40};
  s = kernels::Run("add", args, huge, {});
  EXPECT_TRUE(Contains(s, "too large")) << s.message();
}

TEST_F(KernelsTest, EveryKernelRejectsShortBuffers) {
  // Each registered kernel, called with operands one element too small for
  // its shape, must fail with the kernel's name and never read past them.
  struct Call {
    std::string kernel;
    std::vector<std::pair<DType, size_t>> args;  // dtype, elements
    std::vector<int64_t> params;
    std::vector<float> fparams;
  };
  const int64_t r = 2, w = 5;
  const size_t e = r * w;
  const DType h = DType::kF16, f = DType::kF32;
  const std::vector<Call> calls = {
      {"gemm", {{h, 6}, {h, 6}, {f, 4}}, {2, 3, 2, 0}, {}},
      {"gemm_nt", {{h, 6}, {h, 6}, {f, 4}}, {2, 3, 2, 0}, {1.0f}},
      {"reduce_partials", {{f, 7}, {f, 7}, {f, 7}}, {7}, {}},
      {"add", {{h, e}, {h, e}, {h, e}}, {r, w}, {}},
      {"bias_add", {{h, e}, {h, w}, {h, e}}, {r, w}, {}},
      {"gelu", {{h, e}, {h, e}}, {r, w, 0}, {}},
      {"bias_gelu", {{h, e}, {h, w}, {h, e}}, {r, w, 0}, {}},
      {"cast", {{h, e}, {f, e}}, {r, w}, {}},
      {"layernorm", {{h, e}, {h, w}, {h, w}, {h, e}}, {r, w}, {1e-6f}},
      {"ln_moments", {{h, e}, {f, r * 3}}, {r, w}, {}},
      {"moments_combine", {{f, r * 3}, {f, r * 3}, {f, r * 3}}, {r}, {}},
      {"normalize", {{h, e}, {f, r * 3}, {h, w}, {h, w}, {h, e}}, {r, w},
       {1e-6f}},
      {"residual_moments", {{h, e}, {h, e}, {h, e}, {f, r * 3}}, {r, w}, {}},
      {"softmax", {{h, e}, {h, e}}, {r, w}, {1.0f}},
      {"softmax_state", {{h, e}, {f, r * 2}}, {r, w}, {1.0f}},
      {"softmax_combine", {{f, r * 2}, {f, r * 2}, {f, r * 2}}, {r}, {}},
      {"softmax_normalize", {{h, e}, {f, r * 2}, {h, e}}, {r, w}, {1.0f}},
      {"copy", {{h, e}, {h, e}}, {int64_t(e * 2)}, {}},
      {"unary", {{h, e}, {h, e}}, {r, w, 5}, {}},
      {"binary", {{h, e}, {h, e}, {h, e}}, {r, w, 2, 0}, {}},
      {"binary_row", {{h, e}, {h, w}, {h, e}}, {r, w, 3, 1}, {}},
      {"binary_col", {{h, e}, {h, r}, {h, e}}, {r, w, 2, 0}, {}},
      {"scale", {{h, e}, {h, e}}, {r, w}, {0.5f}},
  };
  EXPECT_EQ(calls.size(), RegisteredKernels().size());
  for (const Call& call : calls) {
    // The exact sizes work (moments get a valid count so normalize runs).
    std::vector<std::unique_ptr<Buffer>> bufs;
    std::vector<Operand> ops;
    for (const auto& [dtype, n] : call.args) {
      bufs.push_back(std::make_unique<Buffer>(dtype, n));
      std::vector<float> ones(n, 1.0f);
      bufs.back()->Set(ones);
      ops.push_back(bufs.back()->op);
    }
    Status ok = kernels::Run(call.kernel, ops, call.params, call.fparams);
    EXPECT_TRUE(ok.ok()) << call.kernel << ": " << ok.message();
    // Each operand in turn one element short.
    for (size_t i = 0; i < ops.size(); ++i) {
      std::vector<Operand> shorter = ops;
      shorter[i].bytes -= DTypeBytes(shorter[i].dtype);
      Status s = kernels::Run(call.kernel, shorter, call.params, call.fparams);
      EXPECT_FALSE(s.ok()) << call.kernel << " operand " << i;
      EXPECT_TRUE(Contains(s, "needs")) << s.message();
      EXPECT_TRUE(Contains(s, call.kernel + ":")) << s.message();
    }
  }
}

TEST_F(KernelsTest, RegistryFormulasAreTheTargetsKernels) {
  // Every formula a registry kernel can be charged with is one the target
  // must define, and every required formula is used by some kernel.
  std::set<std::string_view> used;
  for (const KernelInfo& k : RegisteredKernels()) {
    EXPECT_EQ(FindKernel(k.name), &k);
    for (std::string_view f : k.formulas) {
      used.insert(f);
      EXPECT_TRUE(model_->HasKernel(f)) << f;
    }
  }
  for (std::string_view f : RequiredKernels()) {
    EXPECT_TRUE(used.count(f)) << f << " is required but never charged";
  }
  EXPECT_EQ(FindKernel("nope"), nullptr);
}

TEST_F(KernelsTest, EveryKernelNameIsRegisteredOnce) {
  // kernels/kernel_names.h and the registry table name the same kernels.
  const std::string_view named[] = {names::kGemm,
                                    names::kGemmNt,
                                    names::kReducePartials,
                                    names::kAdd,
                                    names::kBiasAdd,
                                    names::kGelu,
                                    names::kBiasGelu,
                                    names::kCast,
                                    names::kLayerNorm,
                                    names::kLnMoments,
                                    names::kMomentsCombine,
                                    names::kNormalize,
                                    names::kResidualMoments,
                                    names::kSoftmax,
                                    names::kSoftmaxState,
                                    names::kSoftmaxCombine,
                                    names::kSoftmaxNormalize,
                                    names::kCopy,
                                    names::kUnary,
                                    names::kBinary,
                                    names::kBinaryRow,
                                    names::kBinaryCol,
                                    names::kScale};
  std::set<std::string_view> unique(std::begin(named), std::end(named));
  EXPECT_EQ(unique.size(), std::size(named));
  EXPECT_EQ(RegisteredKernels().size(), std::size(named));
  for (std::string_view name : named) {
    const KernelInfo* info = FindKernel(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(info->name, name);
  }
}

TEST_F(KernelsTest, ZeroSizedCallsAreFine) {
  Buffer empty(DType::kF16, 0);
  std::vector<Operand> args = {empty.op, empty.op, empty.op};
  const int64_t params[] = {0, 7};
  EXPECT_TRUE(kernels::Run("add", args, params, {}).ok());
  const int64_t gemm_params[] = {0, 0, 0, 0};
  EXPECT_TRUE(kernels::Run("gemm", args, gemm_params, {}).ok());
}

}  // namespace
}  // namespace tilec::kernels
