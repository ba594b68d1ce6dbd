#include "sim/tensor_data.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>

#include "kernels/numerics.h"

namespace tilec::kernels {
namespace {

fb::ValueT MakeValue(std::vector<int64_t> shape, fb::DType dtype,
                     fb::Distribution distribution, uint64_t seed, float mean,
                     float stddev) {
  fb::ValueT value;
  value.id = 7;
  value.name = "l0.mlp.up.w";
  value.shape = std::move(shape);
  value.dtype = dtype;
  value.role = fb::ValueRole::Weight;
  value.init = std::make_unique<fb::WeightInitT>();
  value.init->distribution = distribution;
  value.init->seed = seed;
  value.init->mean = mean;
  value.init->stddev = stddev;
  return value;
}

std::vector<float> Materialize(const fb::ValueT& value) {
  std::vector<float> data;
  const Status status = MaterializeValue(value, &data);
  EXPECT_TRUE(status.ok()) << status.message();
  return data;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(TensorDataTest, GenerationIsDeterministic) {
  const fb::ValueT v = MakeValue({64, 33}, fb::DType::F32,
                                 fb::Distribution::Gaussian, 42, 0.0f, 1.0f);
  EXPECT_TRUE(SameBits(Materialize(v), Materialize(v)));
}

// Counter-based: element i does not depend on how many are generated, so a
// slice of a tensor can be rebuilt alone. Odd counts end inside a pair.
TEST(TensorDataTest, ElementsDoNotDependOnCount) {
  fb::WeightInitT init;
  init.distribution = fb::Distribution::Gaussian;
  init.seed = 5;
  init.stddev = 1.0f;
  const std::vector<float> long_run = GenerateInit(init, 1001);
  for (size_t count : {0, 1, 2, 7, 1000}) {
    const std::vector<float> short_run = GenerateInit(init, count);
    ASSERT_EQ(short_run.size(), count);
    for (size_t i = 0; i < count; ++i) EXPECT_EQ(short_run[i], long_run[i]);
  }
}

TEST(TensorDataTest, SeedsGiveDifferentStreams) {
  fb::WeightInitT a;
  a.distribution = fb::Distribution::Gaussian;
  a.seed = 1;
  a.stddev = 1.0f;
  fb::WeightInitT b = a;
  b.seed = 2;
  const std::vector<float> x = GenerateInit(a, 1000);
  const std::vector<float> y = GenerateInit(b, 1000);
  int equal = 0;
  double dot = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    equal += x[i] == y[i];
    dot += static_cast<double>(x[i]) * y[i];
  }
  EXPECT_LT(equal, 5);
  // Uncorrelated: |correlation| well below 5 / sqrt(1000).
  EXPECT_LT(std::abs(dot / 1000.0), 0.15);
}

// The exact bits of the first elements: weights are part of every golden
// and every comparison, so a change here must be deliberate. They use no
// libm function, so they are the same on every platform. (They agree with
// a textbook Box-Muller using libm's log/cos/sin in double precision.)
TEST(TensorDataTest, PinnedValues) {
  fb::WeightInitT init;
  init.distribution = fb::Distribution::Gaussian;
  init.seed = 42;
  init.mean = 0.0f;
  init.stddev = 1.0f;
  const std::vector<float> g = GenerateInit(init, 4);
  const uint32_t expected_gaussian[] = {0x3F0B0580, 0x3F5C2DB1, 0x3FE77659,
                                        0x3F10170A};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(g[i]), expected_gaussian[i])
        << "element " << i << " = " << g[i];
  }
  init.distribution = fb::Distribution::Uniform;
  const std::vector<float> u = GenerateInit(init, 4);
  const uint32_t expected_uniform[] = {0x3E44D9F9, 0xBF2DE497, 0xBF2ACDE8,
                                       0xBF67692A};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(u[i]), expected_uniform[i])
        << "element " << i << " = " << u[i];
  }
}

// The bytes of a whole large tensor (two threads generate it): a digest
// pinned from the generator before it was made faster, so speed work on it
// keeps every weight bit.
TEST(TensorDataTest, PinnedDigestOfALargeTensor) {
  constexpr int64_t kCount = (int64_t{1} << 21) + 3;
  const fb::ValueT v = MakeValue({kCount}, fb::DType::F32,
                                 fb::Distribution::Gaussian, 7, 0.25f, 0.02f);
  const std::vector<float> g = GenerateInit(*v.init, kCount);
  const std::string_view bytes(reinterpret_cast<const char*>(g.data()),
                               g.size() * sizeof(float));
  EXPECT_EQ(Fnv1a64(bytes), 0x50E94347DA180E2EULL);
}

TEST(TensorDataTest, GaussianStatistics) {
  constexpr size_t kCount = 200000;
  const fb::ValueT v = MakeValue({static_cast<int64_t>(kCount)}, fb::DType::F32,
                                 fb::Distribution::Gaussian, 1234, 0.5f, 2.0f);
  const std::vector<float> data = Materialize(v);
  double sum = 0, sum_sq = 0, sum_4 = 0, sum_3 = 0;
  size_t within_one = 0, within_two = 0;
  for (float f : data) sum += f;
  const double mean = sum / kCount;
  for (float f : data) {
    const double z = (f - 0.5) / 2.0;
    sum_sq += (f - mean) * (f - mean);
    sum_3 += z * z * z;
    sum_4 += z * z * z * z;
    within_one += std::abs(z) < 1.0;
    within_two += std::abs(z) < 2.0;
  }
  const double stddev = std::sqrt(sum_sq / kCount);
  // Standard errors: mean 2/sqrt(n) = 0.0045, stddev ~0.0032; bounds are
  // about five of them.
  EXPECT_NEAR(mean, 0.5, 0.025);
  EXPECT_NEAR(stddev, 2.0, 0.02);
  EXPECT_NEAR(sum_3 / kCount, 0.0, 0.03);  // skewness
  EXPECT_NEAR(sum_4 / kCount, 3.0, 0.08);  // kurtosis
  EXPECT_NEAR(static_cast<double>(within_one) / kCount, 0.6827, 0.006);
  EXPECT_NEAR(static_cast<double>(within_two) / kCount, 0.9545, 0.003);
}

TEST(TensorDataTest, UniformRangeAndStatistics) {
  constexpr size_t kCount = 100000;
  const fb::ValueT v = MakeValue({static_cast<int64_t>(kCount)}, fb::DType::F32,
                                 fb::Distribution::Uniform, 9, 3.0f, 0.5f);
  const std::vector<float> data = Materialize(v);
  double sum = 0, sum_sq = 0;
  for (float f : data) {
    ASSERT_GE(f, 2.5f);
    ASSERT_LE(f, 3.5f);
    sum += f;
  }
  const double mean = sum / kCount;
  for (float f : data) sum_sq += (f - mean) * (f - mean);
  EXPECT_NEAR(mean, 3.0, 0.005);
  // Variance of U(a - s, a + s) is s^2 / 3.
  EXPECT_NEAR(sum_sq / kCount, 0.25 / 3.0, 0.002);
}

TEST(TensorDataTest, ConstantInit) {
  const fb::ValueT v = MakeValue({3, 5}, fb::DType::F16,
                                 fb::Distribution::Constant, 1, 1.0f, 0.0f);
  const std::vector<float> data = Materialize(v);
  ASSERT_EQ(data.size(), 15u);
  for (float f : data) EXPECT_EQ(f, 1.0f);
  // A constant off the F16 grid is stored rounded.
  const fb::ValueT third =
      MakeValue({2}, fb::DType::F16, fb::Distribution::Constant, 1, 0.1f, 0.0f);
  for (float f : Materialize(third)) EXPECT_EQ(f, RoundToF16(0.1f));
}

TEST(TensorDataTest, RoundsToStoredDType) {
  for (fb::DType dtype : {fb::DType::F16, fb::DType::BF16}) {
    fb::ValueT v =
        MakeValue({1000}, dtype, fb::Distribution::Gaussian, 3, 0.0f, 1.0f);
    const std::vector<float> stored = Materialize(v);
    v.dtype = fb::DType::F32;
    const std::vector<float> exact = Materialize(v);
    size_t changed = 0;
    for (size_t i = 0; i < exact.size(); ++i) {
      const float expected = dtype == fb::DType::F16 ? RoundToF16(exact[i])
                                                     : RoundToBf16(exact[i]);
      EXPECT_EQ(stored[i], expected) << i;
      changed += stored[i] != exact[i];
    }
    EXPECT_GT(changed, 900u);  // almost no Gaussian sample is on the grid
  }
}

TEST(TensorDataTest, RoundsToScaledFp8) {
  fb::ValueT v = MakeValue({1000}, fb::DType::FP8E4M3,
                           fb::Distribution::Gaussian, 3, 0.0f, 0.05f);
  v.fp8_scale_exp = 8;  // 0.05 * 256 = 12.8: well inside E4M3's range
  const std::vector<float> stored = Materialize(v);
  v.dtype = fb::DType::F32;
  const std::vector<float> exact = Materialize(v);
  for (size_t i = 0; i < exact.size(); ++i) {
    EXPECT_EQ(stored[i], RoundToFp8(exact[i], Fp8Format::kE4M3, 8)) << i;
  }
  // Saturation: 1000 is beyond E4M3's 448.
  fb::ValueT big = MakeValue({4}, fb::DType::FP8E4M3,
                             fb::Distribution::Constant, 1, 1000.0f, 0.0f);
  for (float f : Materialize(big)) EXPECT_EQ(f, 448.0f);
  // The scale applies to FP8 only: an F16 value ignores the field.
  fb::ValueT f16 =
      MakeValue({4}, fb::DType::F16, fb::Distribution::Constant, 1, 3.0f, 0.0f);
  f16.fp8_scale_exp = 5;
  for (float f : Materialize(f16)) EXPECT_EQ(f, 3.0f);
}

TEST(TensorDataTest, EncodeStoredGivesCodes) {
  const std::vector<float> data = {1.0f, -2.0f};
  const std::string f16 = EncodeStored(fb::DType::F16, 0, data);
  ASSERT_EQ(f16.size(), 4u);
  EXPECT_EQ(static_cast<unsigned char>(f16[0]), 0x00);
  EXPECT_EQ(static_cast<unsigned char>(f16[1]), 0x3C);  // 1.0 = 0x3C00
  EXPECT_EQ(static_cast<unsigned char>(f16[3]), 0xC0);  // -2.0 = 0xC000
  const std::string fp8 = EncodeStored(fb::DType::FP8E4M3, 1, data);
  ASSERT_EQ(fp8.size(), 2u);
  EXPECT_EQ(static_cast<uint8_t>(fp8[0]), Fp8Encode(1.0f, Fp8Format::kE4M3, 1));
  EXPECT_EQ(static_cast<uint8_t>(fp8[1]),
            Fp8Encode(-2.0f, Fp8Format::kE4M3, 1));
}

TEST(TensorDataTest, MissingInitIsBadInput) {
  fb::ValueT v;
  v.id = 12;
  v.name = "l0.attn.qkv.out";
  v.shape = {4, 8};
  v.dtype = fb::DType::F16;
  std::vector<float> data;
  const Status status = MaterializeValue(v, &data);
  EXPECT_EQ(status.code(), StatusCode::kBadInput);
  EXPECT_NE(status.message().find("value 12 (l0.attn.qkv.out)"),
            std::string::npos)
      << status.message();
}

TEST(TensorDataTest, UnknownDistributionIsBadInput) {
  fb::ValueT v =
      MakeValue({4}, fb::DType::F16, fb::Distribution::Gaussian, 1, 0.0f, 1.0f);
  v.init->distribution = static_cast<fb::Distribution>(9);
  std::vector<float> data;
  EXPECT_EQ(MaterializeValue(v, &data).code(), StatusCode::kBadInput);
}

TEST(TensorDataTest, Fnv1a64KnownValues) {
  // Reference values of the FNV-1a 64 specification.
  EXPECT_EQ(Fnv1a64(""), 0xCBF29CE484222325ULL);
  EXPECT_EQ(Fnv1a64("a"), 0xAF63DC4C8601EC8CULL);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171F73967E8ULL);
}

// ---------------------------------------------------------------- sidecars

class SidecarTest : public ::testing::Test {
 protected:
  // A file with 8 bytes of other data, then four little-endian floats.
  void SetUp() override {
    dir_ = ::testing::TempDir();
    floats_ = {1.0f, -0.5f, 0.1f, 70000.0f};
    payload_ = EncodeStored(fb::DType::F32, 0, floats_);
    std::ofstream out(dir_ + "/weights.bin", std::ios::binary);
    out << "HEADER!!" << payload_;
  }

  fb::ValueT SidecarValue(fb::DType dtype) const {
    fb::ValueT v;
    v.id = 3;
    v.name = "w";
    v.shape = {2, 2};
    v.dtype = dtype;
    v.role = fb::ValueRole::Weight;
    v.sidecar = std::make_unique<fb::SidecarT>();
    v.sidecar->path = "weights.bin";
    v.sidecar->offset = 8;
    v.sidecar->bytes = payload_.size();
    v.sidecar->fnv1a64 = Fnv1a64(payload_);
    return v;
  }

  std::string dir_;
  std::vector<float> floats_;
  std::string payload_;
};

TEST_F(SidecarTest, ReadsAndRounds) {
  std::vector<float> data;
  Status status = MaterializeValue(SidecarValue(fb::DType::F32), dir_, &data);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(data, floats_);
  status = MaterializeValue(SidecarValue(fb::DType::F16), dir_, &data);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(data[2], RoundToF16(0.1f));
  EXPECT_TRUE(std::isinf(data[3]));  // beyond F16's 65504
}

TEST_F(SidecarTest, SidecarWinsOverInit) {
  fb::ValueT v = SidecarValue(fb::DType::F32);
  v.init = std::make_unique<fb::WeightInitT>();
  v.init->distribution = fb::Distribution::Constant;
  v.init->mean = 9.0f;
  std::vector<float> data;
  ASSERT_TRUE(MaterializeValue(v, dir_, &data).ok());
  EXPECT_EQ(data, floats_);
}

TEST_F(SidecarTest, WrongChecksumIsBadInput) {
  fb::ValueT v = SidecarValue(fb::DType::F16);
  v.sidecar->fnv1a64 ^= 1;
  std::vector<float> data;
  const Status status = MaterializeValue(v, dir_, &data);
  EXPECT_EQ(status.code(), StatusCode::kBadInput);
  EXPECT_NE(status.message().find("checksum"), std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("weights.bin"), std::string::npos);
  EXPECT_NE(status.message().find("value 3 (w)"), std::string::npos);
}

TEST_F(SidecarTest, RangeAndSizeErrors) {
  std::vector<float> data;
  fb::ValueT past_end = SidecarValue(fb::DType::F16);
  past_end.sidecar->offset = 12;
  EXPECT_EQ(MaterializeValue(past_end, dir_, &data).code(),
            StatusCode::kBadInput);
  fb::ValueT wrong_size = SidecarValue(fb::DType::F16);
  wrong_size.sidecar->bytes = 12;
  EXPECT_EQ(MaterializeValue(wrong_size, dir_, &data).code(),
            StatusCode::kBadInput);
  fb::ValueT missing = SidecarValue(fb::DType::F16);
  missing.sidecar->path = "nowhere.bin";
  const Status status = MaterializeValue(missing, dir_, &data);
  EXPECT_EQ(status.code(), StatusCode::kBadInput);
  EXPECT_NE(status.message().find("nowhere.bin"), std::string::npos);
}

}  // namespace
}  // namespace tilec::kernels

namespace tilec::kernels {
namespace {

// A generated init of distribution `d`.
fb::WeightInitT Init(fb::Distribution d, uint64_t seed, float mean,
                     float stddev) {
  fb::WeightInitT init;
  init.distribution = d;
  init.seed = seed;
  init.mean = mean;
  init.stddev = stddev;
  return init;
}

// Large inits are generated on two threads; every element still depends
// only on its counter, so it equals the element of a shorter stream that
// one thread made (checked at the start, around the split and at the end).
TEST(GenerateInitTest, LargeInitsMatchTheSingleThreadedStream) {
  for (fb::Distribution d : {fb::Distribution::Gaussian,
                             fb::Distribution::Uniform}) {
    const fb::WeightInitT init = Init(d, 77, 0.5f, 2.0f);
    const size_t count = (size_t{1} << 20) + 7;
    const std::vector<float> big = GenerateInit(init, count);
    for (size_t k : {size_t{0}, size_t{1}, count / 2 - 3, count / 2 - 1,
                     count / 2, count / 2 + 1, count / 2 + 2, count - 2,
                     count - 1}) {
      const std::vector<float> small = GenerateInit(init, k + 1);
      EXPECT_EQ(big[k], small[k]) << "element " << k;
    }
  }
}

// The vectorized generator (the host's fastest path, and the AVX2 one where
// it has a faster) against the element-by-element one, bit for bit: both
// distributions, seeds, means and scales (negative, zero, tiny, huge),
// ranges starting at any even offset and ending anywhere (odd ends split a
// Box-Muller pair; short ranges leave every element to the scalar tail).
TEST(GenerateInitTest, VectorizedRangesMatchTheScalarLoop) {
  const float kMeans[] = {0.0f, 0.5f, -3.0f, 1e30f};
  const float kStddevs[] = {1.0f, 0.02f, 0.0f, -2.0f, 1e-30f};
  size_t compared = 0;
  for (fb::Distribution d : {fb::Distribution::Gaussian,
                             fb::Distribution::Uniform,
                             fb::Distribution::Constant}) {
    for (uint64_t seed : {uint64_t{0}, uint64_t{1}, uint64_t{42},
                          ~uint64_t{0}}) {
      for (size_t m = 0; m < std::size(kMeans); ++m) {
        const float stddev = kStddevs[(m + seed) % std::size(kStddevs)];
        const fb::WeightInitT init = Init(d, seed, kMeans[m], stddev);
        for (size_t begin : {0, 2, 6, 8, 14, 1000}) {
          for (size_t length : {0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 1025}) {
            const size_t end = begin + length;
            std::vector<float> slow(end + 1, -7.0f);
            GenerateInitRange(init, begin, end, slow.data(),
                              kernels::SimdPath::kPortable);
            for (kernels::SimdPath path : {kernels::SimdPath::kFastest,
                                           kernels::SimdPath::kAvx2}) {
              std::vector<float> fast(end + 1, -7.0f);
              GenerateInitRange(init, begin, end, fast.data(), path);
              ASSERT_EQ(std::memcmp(fast.data(), slow.data(),
                                    fast.size() * sizeof(float)),
                        0)
                  << "distribution " << static_cast<int>(d) << " seed "
                  << seed << " mean " << init.mean << " stddev "
                  << init.stddev << " range [" << begin << ", " << end
                  << ") path " << static_cast<int>(path);
            }
            compared += length;
          }
        }
      }
    }
  }
  EXPECT_GT(compared, size_t{100000});
}

// Many elements of one stream: every Box-Muller input class (u1 near 0 and
// 1, every quadrant and fold of u2) occurs, and each matches.
TEST(GenerateInitTest, VectorizedStreamMatchesTheScalarLoop) {
  for (fb::Distribution d : {fb::Distribution::Gaussian,
                             fb::Distribution::Uniform}) {
    const fb::WeightInitT init = Init(d, 12345, 0.125f, 0.75f);
    constexpr size_t kCount = (size_t{1} << 20) + 5;
    std::vector<float> fast(kCount), avx2(kCount), slow(kCount);
    GenerateInitRange(init, 0, kCount, fast.data());
    GenerateInitRange(init, 0, kCount, avx2.data(), kernels::SimdPath::kAvx2);
    GenerateInitRange(init, 0, kCount, slow.data(),
                      kernels::SimdPath::kPortable);
    EXPECT_TRUE(SameBits(fast, slow)) << static_cast<int>(d);
    EXPECT_TRUE(SameBits(avx2, slow)) << static_cast<int>(d);
    EXPECT_TRUE(SameBits(GenerateInit(init, kCount), slow));
  }
}

}  // namespace
}  // namespace tilec::kernels
