#include "sim/inputs.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>

#include "sim/npy.h"
#include "kernels/numerics.h"

namespace tilec::kernels {
namespace {

// A module with two inputs (F16 "x" [2,3], FP8 "mask/0" [4] with scale
// 2^2) and one weight, which --inputs never reads.
fb::ModuleT TwoInputs() {
  fb::ModuleT module;
  auto add = [&](const std::string& name, std::vector<int64_t> shape,
                 fb::DType dtype, fb::ValueRole role, int scale = 0) {
    auto v = std::make_unique<fb::ValueT>();
    v->id = static_cast<uint32_t>(module.values.size());
    v->name = name;
    v->shape = std::move(shape);
    v->dtype = dtype;
    v->role = role;
    v->fp8_scale_exp = scale;
    module.values.push_back(std::move(v));
  };
  add("x", {2, 3}, fb::DType::F16, fb::ValueRole::Input);
  add("mask/0", {4}, fb::DType::FP8E4M3, fb::ValueRole::Input, 2);
  add("w", {3}, fb::DType::F16, fb::ValueRole::Weight);
  return module;
}

class InputsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(std::getenv("TEST_TMPDIR")) /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::create_directories(dir_);
  }
  std::string Path(const std::string& file) const {
    return (dir_ / file).string();
  }
  void WriteX() {
    ASSERT_TRUE(WriteNpyF32(Path("x.npy"), {2, 3},
                            std::vector<float>{1, 2, 3, 4, 5, 1.0f / 3})
                    .ok());
  }
  Status Load(std::map<uint32_t, std::vector<float>>* inputs) {
    return LoadInputs(TwoInputs(), dir_.string(), inputs);
  }
  std::filesystem::path dir_;
};

TEST_F(InputsTest, FileNamesFollowTheDumpNames) {
  const fb::ModuleT module = TwoInputs();
  EXPECT_EQ(InputFileName(*module.values[0]), "x.npy");
  EXPECT_EQ(InputFileName(*module.values[1]), "mask_0.npy");
  fb::ValueT unnamed;
  unnamed.id = 7;
  EXPECT_EQ(InputFileName(unnamed), "value7.npy");
}

TEST_F(InputsTest, Float32IsRoundedAndOwnCodesAreExact) {
  WriteX();
  // FP8 codes with scale 2^2: code 0x38 is 1.0 before the scale, 0.25 after.
  ASSERT_TRUE(WriteNpy(Path("mask_0.npy"), "|u1", {4},
                       std::string("\x38\x00\x40\xb8", 4))
                  .ok());
  std::map<uint32_t, std::vector<float>> inputs;
  ASSERT_TRUE(Load(&inputs).ok());
  ASSERT_EQ(inputs.size(), 2u);
  EXPECT_EQ(inputs[0][5], RoundToF16(1.0f / 3));
  EXPECT_EQ(inputs[0][4], 5.0f);
  EXPECT_EQ(inputs[1], (std::vector<float>{0.25f, 0.0f, 0.5f, -0.25f}));
}

TEST_F(InputsTest, MissingExtraShapeAndDtypeNameTheFile) {
  WriteX();
  std::map<uint32_t, std::vector<float>> inputs;
  Status status = Load(&inputs);
  EXPECT_EQ(status.code(), StatusCode::kBadInput);
  EXPECT_EQ(status.message(),
            Path("mask_0.npy") +
                ": missing: the input value 1 (mask/0) fp8e4m3[4] has no file");

  ASSERT_TRUE(
      WriteNpyF32(Path("mask_0.npy"), {2, 2}, std::vector<float>(4, 0.0f))
          .ok());
  status = Load(&inputs);
  EXPECT_EQ(status.message(), Path("mask_0.npy") +
                                  ": shape [2,2], the input value 1 (mask/0) "
                                  "is fp8e4m3[4]");

  ASSERT_TRUE(
      WriteNpy(Path("mask_0.npy"), "<f2", {4}, std::string(8, '\0')).ok());
  status = Load(&inputs);
  EXPECT_NE(status.message().find(Path("mask_0.npy") + ": dtype '<f2'"),
            std::string::npos)
      << status.message();

  ASSERT_TRUE(
      WriteNpyF32(Path("mask_0.npy"), {4}, std::vector<float>(4, 1.0f)).ok());
  ASSERT_TRUE(Load(&inputs).ok());
  ASSERT_TRUE(WriteNpyF32(Path("w.npy"), {3}, std::vector<float>(3)).ok());
  status = Load(&inputs);
  EXPECT_EQ(status.message(), Path("w.npy") +
                                  ": names no input of the module (expected "
                                  "mask_0.npy, x.npy)");
  EXPECT_TRUE(inputs.size() == 2u);  // untouched by the failed load
}

// An ONNX input [3,4,5] is tilec's rows [12,5]: either shape is read, the
// same elements in the same order; any other shape of 60 elements is not.
TEST_F(InputsTest, DeclaredShapeIsAcceptedBesideTheRows) {
  fb::ModuleT module;
  auto x = std::make_unique<fb::ValueT>();
  x->name = "x";
  x->shape = {12, 5};
  x->declared_shape = {3, 4, 5};
  x->dtype = fb::DType::F32;
  x->role = fb::ValueRole::Input;
  module.values.push_back(std::move(x));
  std::vector<float> data(60);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
  std::map<uint32_t, std::vector<float>> inputs;
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{3, 4, 5}, std::vector<int64_t>{12, 5}}) {
    ASSERT_TRUE(WriteNpyF32(Path("x.npy"), shape, data).ok());
    ASSERT_TRUE(LoadInputs(module, dir_.string(), &inputs).ok());
    EXPECT_EQ(inputs[0], data);
  }
  ASSERT_TRUE(WriteNpyF32(Path("x.npy"), {4, 3, 5}, data).ok());
  const Status status = LoadInputs(module, dir_.string(), &inputs);
  EXPECT_EQ(status.message(),
            Path("x.npy") + ": shape [4,3,5], the input value 0 (x) is "
                            "f32[12,5] (declared [3,4,5])");
}

// Expected outputs are float32 taken as they are (not rounded to the
// output's F16), one file per output, in either shape.
TEST_F(InputsTest, ExpectedOutputsAreFloat32Unrounded) {
  fb::ModuleT module = TwoInputs();
  auto y = std::make_unique<fb::ValueT>();
  y->id = 3;
  y->name = "y";
  y->shape = {2, 3};
  y->declared_shape = {1, 2, 3};
  y->dtype = fb::DType::F16;
  y->role = fb::ValueRole::Output;
  module.values.push_back(std::move(y));
  const std::vector<float> third(6, 1.0f / 3);
  ASSERT_TRUE(WriteNpyF32(Path("y.npy"), {1, 2, 3}, third).ok());
  std::map<uint32_t, std::vector<float>> outputs;
  ASSERT_TRUE(LoadExpectedOutputs(module, dir_.string(), &outputs).ok());
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[3], third);

  ASSERT_TRUE(WriteNpy(Path("y.npy"), "<f2", {2, 3}, std::string(12, '\0'))
                  .ok());
  Status status = LoadExpectedOutputs(module, dir_.string(), &outputs);
  EXPECT_EQ(status.message(), Path("y.npy") +
                                  ": dtype '<f2', expected float32 '<f4' for "
                                  "the output value 3 (y)");
  ASSERT_TRUE(WriteNpyF32(Path("y.npy"), {2, 3}, third).ok());
  WriteX();
  status = LoadExpectedOutputs(module, dir_.string(), &outputs);
  EXPECT_EQ(status.message(), Path("x.npy") +
                                  ": names no output of the module (expected "
                                  "y.npy)");
  std::filesystem::remove(Path("x.npy"));
  std::filesystem::remove(Path("y.npy"));
  status = LoadExpectedOutputs(module, dir_.string(), &outputs);
  EXPECT_EQ(status.message(), Path("y.npy") +
                                  ": missing: the output value 3 (y) "
                                  "f16[2,3] (declared [1,2,3]) has no file");
  EXPECT_EQ(LoadExpectedOutputs(module, Path("nowhere"), &outputs).message(),
            Path("nowhere") + ": --expect expects a directory of .npy files");
}

TEST_F(InputsTest, NotADirectory) {
  std::map<uint32_t, std::vector<float>> inputs;
  const Status status = LoadInputs(TwoInputs(), Path("nowhere"), &inputs);
  EXPECT_EQ(status.code(), StatusCode::kBadInput);
  EXPECT_EQ(status.message(),
            Path("nowhere") + ": --inputs expects a directory of .npy files");
}

}  // namespace
}  // namespace tilec::kernels
