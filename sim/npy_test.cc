#include "sim/npy.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "formats/ir.h"
#include "kernels/numerics.h"

namespace tilec::kernels {
namespace {

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/" + name;
}

std::string ReadAll(const std::string& path) {
  std::string bytes;
  EXPECT_TRUE(ir::ReadFile(path, &bytes).ok());
  return bytes;
}

// The header as NumPy writes it: magic, version 1.0, little-endian length,
// a dict padded with spaces to a 64-byte boundary and ended by '\n'.
TEST(NpyTest, HeaderLayout) {
  std::string file;
  const std::string data(2 * 3 * 4, '\0');
  ASSERT_TRUE(EncodeNpy("<f4", {2, 3}, data, &file).ok());
  ASSERT_GE(file.size(), 10u);
  EXPECT_EQ(file.substr(0, 6), "\x93NUMPY");
  EXPECT_EQ(file[6], '\x01');
  EXPECT_EQ(file[7], '\x00');
  const size_t header_len = static_cast<unsigned char>(file[8]) |
                            static_cast<unsigned char>(file[9]) << 8;
  EXPECT_EQ((10 + header_len) % 64, 0u);
  ASSERT_EQ(file.size(), 10 + header_len + data.size());
  const std::string header = file.substr(10, header_len);
  const std::string dict =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  EXPECT_EQ(header.substr(0, dict.size()), dict);
  EXPECT_EQ(header.back(), '\n');
  EXPECT_EQ(header.find_first_not_of(' ', dict.size()), header_len - 1);
}

TEST(NpyTest, ShapeTuples) {
  std::string file;
  ASSERT_TRUE(EncodeNpy("<f2", {5}, std::string(10, '\0'), &file).ok());
  EXPECT_NE(file.find("'shape': (5,)"), std::string::npos);
  ASSERT_TRUE(EncodeNpy("|u1", {}, std::string(1, '\0'), &file).ok());
  EXPECT_NE(file.find("'shape': ()"), std::string::npos);
  NpyArray array;
  ASSERT_TRUE(ParseNpy(file, "scalar", &array).ok());
  EXPECT_TRUE(array.shape.empty());
  EXPECT_EQ(array.data.size(), 1u);
}

TEST(NpyTest, EncodeRefusesWrongDataSize) {
  std::string file;
  EXPECT_FALSE(EncodeNpy("<f4", {2, 3}, std::string(20, '\0'), &file).ok());
  EXPECT_FALSE(EncodeNpy("<f8", {1}, std::string(8, '\0'), &file).ok());
}

TEST(NpyTest, Float32RoundTrip) {
  const std::string path = TempPath("round_trip.npy");
  const std::vector<float> values = {0.0f,  -1.5f, 3.25e-8f, 65504.0f,
                                     1e30f, -0.0f, 7.0f,     2.0f};
  ASSERT_TRUE(WriteNpyF32(path, {2, 2, 2}, values).ok());
  std::vector<int64_t> shape;
  std::vector<float> read;
  const Status status = ReadNpyF32(path, &shape, &read);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(shape, (std::vector<int64_t>{2, 2, 2}));
  ASSERT_EQ(read.size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(read[i]),
              std::bit_cast<uint32_t>(values[i]));
  }
  // Little-endian bytes after the header: 0x3FC00000 is 1.5.
  const std::string file = ReadAll(path);
  EXPECT_EQ(file.size() % 64, 32u);  // 64-aligned header + 32 data bytes
  EXPECT_EQ(static_cast<unsigned char>(file[file.size() - 32 + 7]), 0xBF);
  EXPECT_EQ(static_cast<unsigned char>(file[file.size() - 32 + 6]), 0xC0);
}

TEST(NpyTest, StoredCodes) {
  const std::vector<float> values = {1.0f, -2.0f, 0.5f};
  struct Case {
    fb::DType dtype;
    int scale;
    const char* descr;
  };
  for (const Case& c :
       {Case{fb::DType::F16, 0, "<f2"}, Case{fb::DType::BF16, 0, "<u2"},
        Case{fb::DType::FP8E4M3, 3, "|u1"}, Case{fb::DType::FP8E5M2, 0, "|u1"},
        Case{fb::DType::F32, 0, "<f4"}}) {
    const std::string path = TempPath("codes.npy");
    ASSERT_TRUE(WriteNpyStored(path, {3}, c.dtype, c.scale, values).ok());
    NpyArray array;
    ASSERT_TRUE(ParseNpy(ReadAll(path), path, &array).ok());
    EXPECT_EQ(array.descr, c.descr);
    EXPECT_EQ(NpyDescrForStored(c.dtype), c.descr);
    EXPECT_EQ(array.shape, (std::vector<int64_t>{3}));
    const auto* bytes = reinterpret_cast<const uint8_t*>(array.data.data());
    for (size_t i = 0; i < values.size(); ++i) {
      switch (c.dtype) {
        case fb::DType::F16:
          EXPECT_EQ(bytes[2 * i] | bytes[2 * i + 1] << 8, F16Encode(values[i]));
          break;
        case fb::DType::BF16:
          EXPECT_EQ(bytes[2 * i] | bytes[2 * i + 1] << 8,
                    Bf16Encode(values[i]));
          break;
        case fb::DType::FP8E4M3:
          EXPECT_EQ(bytes[i], Fp8Encode(values[i], Fp8Format::kE4M3, 3));
          break;
        case fb::DType::FP8E5M2:
          EXPECT_EQ(bytes[i], Fp8Encode(values[i], Fp8Format::kE5M2, 0));
          break;
        case fb::DType::F32:
          break;
      }
    }
  }
}

TEST(NpyTest, ReadF32RefusesOtherDTypes) {
  const std::string path = TempPath("f16.npy");
  ASSERT_TRUE(
      WriteNpyStored(path, {2}, fb::DType::F16, 0, std::vector<float>{1, 2})
          .ok());
  std::vector<int64_t> shape;
  std::vector<float> values;
  const Status status = ReadNpyF32(path, &shape, &values);
  EXPECT_EQ(status.code(), StatusCode::kBadInput);
  EXPECT_NE(status.message().find(path), std::string::npos);
  EXPECT_NE(status.message().find("<f2"), std::string::npos);
}

// A header in NumPy's own spelling variants (double quotes, no trailing
// comma, extra spaces) and format version 2.0.
TEST(NpyTest, ParsesVersion2AndHeaderVariants) {
  const std::string dict =
      "{\"descr\":\"<f4\" , \"shape\" : ( 2 ,1 ), \"fortran_order\":False}";
  std::string header =
      dict + std::string(64 - (12 + dict.size() + 1) % 64, ' ') + "\n";
  std::string file = "\x93NUMPY";
  file += '\x02';
  file += '\x00';
  for (int i = 0; i < 4; ++i) {
    file += static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  }
  file += header;
  file += std::string("\x00\x00\x80\x3F\x00\x00\x00\x40", 8);  // 1.0, 2.0
  NpyArray array;
  const Status status = ParseNpy(file, "v2.npy", &array);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(array.shape, (std::vector<int64_t>{2, 1}));
  EXPECT_FALSE(array.fortran_order);
}

TEST(NpyTest, MalformedFiles) {
  std::string good;
  ASSERT_TRUE(EncodeNpy("<f4", {2}, std::string(8, '\0'), &good).ok());
  NpyArray array;
  auto parse = [&array](const std::string& bytes) {
    return ParseNpy(bytes, "bad.npy", &array);
  };
  EXPECT_TRUE(parse(good).ok());
  EXPECT_FALSE(parse("").ok());
  EXPECT_FALSE(parse("not an npy file at all").ok());
  EXPECT_FALSE(parse(good.substr(0, good.size() - 1)).ok());  // short data
  EXPECT_FALSE(parse(good + "x").ok());                       // long data
  EXPECT_FALSE(parse(good.substr(0, 30)).ok());               // cut header
  std::string fortran = good;
  fortran.replace(fortran.find("False"), 5, "True ");
  EXPECT_FALSE(parse(fortran).ok());
  std::string extra_key = good;
  extra_key.replace(extra_key.find("'shape'"), 7, "'shapf'");
  EXPECT_FALSE(parse(extra_key).ok());
  std::string f8 = good;
  f8.replace(f8.find("<f4"), 3, "<f8");
  const Status status = parse(f8);
  EXPECT_EQ(status.code(), StatusCode::kBadInput);
  EXPECT_NE(status.message().find("bad.npy"), std::string::npos);
}

// Atomic writes: a failed write leaves no file behind.
TEST(NpyTest, WriteIntoMissingDirectoryFails) {
  const std::string path = TempPath("no/such/dir/x.npy");
  EXPECT_FALSE(WriteNpyF32(path, {1}, std::vector<float>{1.0f}).ok());
  std::ifstream in(path);
  EXPECT_FALSE(in.good());
}

}  // namespace
}  // namespace tilec::kernels
