#include "kernels/cost.h"

#include <gtest/gtest.h>

#include <limits>
#include <optional>
#include <string>

#include "kernels/test_target.h"

namespace tilec::kernels {
namespace {

// The expectations below are docs/machine.md's formulas worked by hand,
// never computed by the code under test.

class CostModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    target_ = LoadTestTarget("ipu21");
    StatusOr<CostModel> model = CostModel::Create(target_);
    ASSERT_TRUE(model.ok()) << model.status().message();
    model_.emplace(*model);
  }

  int64_t Cycles(std::string_view kernel, std::initializer_list<CostVar> vars,
                 KernelPath path = KernelPath::kFast) {
    StatusOr<int64_t> c = model_->Cycles(kernel, vars, path);
    EXPECT_TRUE(c.ok()) << c.status().message();
    return c.ok() ? *c : -1;
  }

  fb::TargetT target_;
  std::optional<CostModel> model_;
};

TEST_F(CostModelTest, PresetsAreValid) {
  EXPECT_TRUE(ValidateTarget(target_).ok());
  EXPECT_TRUE(ValidateTarget(LoadTestTarget("tiny")).ok());
}

TEST_F(CostModelTest, GemmFormulas) {
  // 294 + ceil(192/32)=6 * ceil(160/16)=10 * (4*82 + 160) = 294 + 60*488.
  EXPECT_EQ(Cycles("gemm_fp8", {{"M", 82}, {"K", 192}, {"N", 160}}), 29574);
  // 294 + 5 * 8 * (4*122 + 160) = 294 + 40*648.
  EXPECT_EQ(Cycles("gemm_fp8", {{"M", 122}, {"K", 160}, {"N", 128}}), 26214);
  // F16: ceil(192/16)=12 -> 294 + 120*488.
  EXPECT_EQ(Cycles("gemm_f16", {{"M", 82}, {"K", 192}, {"N", 160}}), 58854);
  // F32: ceil(192/8)=24 -> 294 + 240*488.
  EXPECT_EQ(Cycles("gemm_f32", {{"M", 82}, {"K", 192}, {"N", 160}}), 117414);
  // Partial blocks round up: ceil(33/32)=2, ceil(17/16)=2 -> 294 + 4*(4+160).
  EXPECT_EQ(Cycles("gemm_fp8", {{"M", 1}, {"K", 33}, {"N", 17}}), 950);
}

TEST_F(CostModelTest, ElementwiseFormulas) {
  // add: 200 + ceil(1152/4)*4 = 200 + 288*4.
  EXPECT_EQ(Cycles("add", {{"n", 1152}}), 1352);
  // Slow path doubles the terms, not the base: 200 + 2*1152.
  EXPECT_EQ(Cycles("add", {{"n", 1152}}, KernelPath::kSlow), 2504);
  // gelu: 300 + 366*ceil(1152/96) = 300 + 366*12.
  EXPECT_EQ(Cycles("gelu", {{"n", 1152}}), 4692);
  // bias_gelu: 480 + 15*ceil(n/4): the three measured shapes.
  EXPECT_EQ(Cycles("bias_gelu", {{"n", 2152}}), 8550);
  EXPECT_EQ(Cycles("bias_gelu", {{"n", 1408}}), 5760);
  EXPECT_EQ(Cycles("bias_gelu", {{"n", 16}}), 540);
  // bias_gelu_fp8: 480 + 25*538.
  EXPECT_EQ(Cycles("bias_gelu_fp8", {{"n", 2152}}), 13930);
  // cast: 200 + 10*ceil(2132/4) = 200 + 10*533.
  EXPECT_EQ(Cycles("cast", {{"n", 2132}}), 5530);
  // A formula without a slow path is unchanged by it.
  EXPECT_EQ(Cycles("cast", {{"n", 2132}}, KernelPath::kSlow), 5530);
}

TEST_F(CostModelTest, RowFormulas) {
  // reduce: 282 + 6*ceil(2624/48)*(11 + 2*5) = 282 + 6*55*21.
  EXPECT_EQ(Cycles("reduce_partials", {{"n", 2624}, {"P", 6}}), 7212);
  // One partial: the (P-1) term vanishes: 282 + 66*55.
  EXPECT_EQ(Cycles("reduce_partials", {{"n", 2624}, {"P", 1}}), 3912);
  // layernorm: 300 + 1*(48 + 11*576).
  EXPECT_EQ(Cycles("layernorm", {{"rows", 1}, {"w", 1152}}), 6684);
  // layernorm_fp8: 1.06 * 6684 = 7085.04, rounded up.
  EXPECT_EQ(Cycles("layernorm_fp8", {{"rows", 1}, {"w", 1152}}), 7086);
  // ln_moments: 150 + 24 + 6*576.
  EXPECT_EQ(Cycles("ln_moments", {{"rows", 1}, {"w", 1152}}), 3630);
  // residual_moments: 250 + 40 + 7*576.
  EXPECT_EQ(Cycles("residual_moments", {{"rows", 1}, {"w", 1152}}), 4322);
  // moments_combine: 150 + 12*10*6.
  EXPECT_EQ(Cycles("moments_combine", {{"rows", 10}, {"P", 6}}), 870);
  // normalize: 300 + 3*(24 + 5*96); FP8: 1.06 * 1812 = 1920.72.
  EXPECT_EQ(Cycles("normalize", {{"rows", 3}, {"w", 192}}), 1812);
  EXPECT_EQ(Cycles("normalize_fp8", {{"rows", 3}, {"w", 192}}), 1921);
  // softmax: 300 + ceil(2/6)*(100 + 34*ceil(729/2)) = 300 + 100 + 34*365;
  // 8 rows (two rounds of the 6 workers) as docs/machine.md: 25,320.
  EXPECT_EQ(Cycles("softmax", {{"rows", 2}, {"w", 729}}), 12810);
  EXPECT_EQ(Cycles("softmax", {{"rows", 8}, {"w", 729}}), 25320);
  EXPECT_EQ(Cycles("softmax", {{"rows", 7}, {"w", 729}}), 25320);
  // copy: 288 + ceil(B/8).
  EXPECT_EQ(Cycles("copy", {{"B", 1000}}), 413);
  EXPECT_EQ(Cycles("copy", {{"B", 1001}}), 414);
}

TEST_F(CostModelTest, ExtraVariablesAreIgnored) {
  EXPECT_EQ(Cycles("copy", {{"M", 5}, {"B", 8}, {"rows", 3}}), 289);
}

TEST_F(CostModelTest, TargetNumbers) {
  EXPECT_EQ(model_->vector_elements(), 4);
  EXPECT_EQ(model_->sync_cycles(), 277);
  EXPECT_EQ(model_->exchange_bytes_per_cycle(), 4);
  EXPECT_EQ(model_->exchange_fragment_cycles(), 2);
  EXPECT_EQ(model_->workers(), 6);
  EXPECT_DOUBLE_EQ(model_->clock_hz(), 1.5e9);
  // The copy kernel's formula: 288 + ceil(1000/8).
  EXPECT_EQ(Cycles("copy", {{"B", 1000}}), 413);
}

TEST_F(CostModelTest, MissingKernelIsNamed) {
  StatusOr<int64_t> c = model_->Cycles("matmul_int4", {{"n", 1}});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("'matmul_int4'"), std::string::npos)
      << c.status().message();
  EXPECT_NE(c.status().message().find("ipu21"), std::string::npos);
  EXPECT_FALSE(model_->HasKernel("matmul_int4"));
  EXPECT_TRUE(model_->HasKernel("gemm_fp8"));
}

TEST_F(CostModelTest, MissingOrNegativeVariable) {
  StatusOr<int64_t> c = model_->Cycles("gemm_fp8", {{"M", 4}, {"K", 32}});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("variable 'N'"), std::string::npos)
      << c.status().message();
  EXPECT_NE(c.status().message().find("gemm_fp8"), std::string::npos);
  c = model_->Cycles("add", {{"n", -4}});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("negative"), std::string::npos);
}

TEST(EvaluateFormulaTest, HandBuiltFormula) {
  // 2 * (10 + s * 2.5 * ceil((n + 3) / 4) * rows), s = 3 on the slow path.
  fb::KernelFormulaT f;
  f.kernel = "test";
  f.base = 10;
  f.multiplier = 2;
  f.slow_path_term_multiplier = 3;
  auto term = std::make_unique<fb::CostTermT>();
  term->coefficient = 2.5;
  auto n = std::make_unique<fb::CostFactorT>();
  n->variable = "n";
  n->divisor = 4;
  n->offset = 3;
  auto rows = std::make_unique<fb::CostFactorT>();
  rows->variable = "rows";
  term->factors.push_back(std::move(n));
  term->factors.push_back(std::move(rows));
  f.terms.push_back(std::move(term));

  const CostVar vars[] = {{"n", 6}, {"rows", 3}};
  // ceil(9/4) = 3: 2 * (10 + 2.5*3*3) = 65.
  StatusOr<double> v = EvaluateFormula(f, vars);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_DOUBLE_EQ(*v, 65.0);
  // 2 * (10 + 3 * 22.5) = 155.
  v = EvaluateFormula(f, vars, KernelPath::kSlow);
  ASSERT_TRUE(v.ok());
  EXPECT_DOUBLE_EQ(*v, 155.0);
  // n = 0: ceil(3/4) = 1: 2 * (10 + 2.5*3) = 35.
  const CostVar zero[] = {{"n", 0}, {"rows", 3}};
  v = EvaluateFormula(f, zero);
  ASSERT_TRUE(v.ok());
  EXPECT_DOUBLE_EQ(*v, 35.0);
}

TEST(RoundUpCyclesTest, RoundsUpButForgivesFloatNoise) {
  EXPECT_EQ(RoundUpCycles(53.0), 53);
  EXPECT_EQ(RoundUpCycles(53.000000000001), 53);  // 1.06 * 50 in doubles
  EXPECT_EQ(RoundUpCycles(1.06 * 50), 53);
  EXPECT_EQ(RoundUpCycles(53.01), 54);
  EXPECT_EQ(RoundUpCycles(7085.04), 7086);
  EXPECT_EQ(RoundUpCycles(0.0), 0);
}

TEST(ValidateTargetTest, ReportsEveryProblem) {
  fb::TargetT t = LoadTestTarget("ipu21");
  t.tiles = 0;
  t.alignment = 6;
  // Drop softmax, break one divisor and one variable name.
  for (auto it = t.kernels.begin(); it != t.kernels.end(); ++it) {
    if ((*it)->kernel == "softmax") {
      t.kernels.erase(it);
      break;
    }
  }
  for (auto& k : t.kernels) {
    if (k->kernel == "gelu") k->terms[0]->factors[0]->divisor = 0;
    if (k->kernel == "cast") k->terms[0]->factors[0]->variable = "q";
  }
  const std::string error = ValidateTarget(t).message();
  EXPECT_NE(error.find("tiles"), std::string::npos) << error;
  EXPECT_NE(error.find("alignment 6"), std::string::npos) << error;
  EXPECT_NE(error.find("lacks kernel formula 'softmax'"), std::string::npos)
      << error;
  EXPECT_NE(error.find("kernel 'gelu'"), std::string::npos) << error;
  EXPECT_NE(error.find("unknown variable 'q'"), std::string::npos) << error;

  StatusOr<CostModel> model = CostModel::Create(t);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("softmax"), std::string::npos);
}

TEST(ValidateTargetTest, DuplicateKernelAndBadMultiplier) {
  fb::TargetT t = LoadTestTarget("ipu21");
  auto copy = std::make_unique<fb::KernelFormulaT>(*t.kernels[0]);
  const std::string name = copy->kernel;
  t.kernels.push_back(std::move(copy));
  t.kernels[1]->multiplier = 0;
  const std::string error = ValidateTarget(t).message();
  EXPECT_NE(error.find("'" + name + "' is defined twice"), std::string::npos)
      << error;
  EXPECT_NE(error.find("multiplier 0 is not positive"), std::string::npos)
      << error;
}

TEST(ValidateTargetTest, InfiniteNumbers) {
  fb::TargetT t = LoadTestTarget("ipu21");
  t.kernels[0]->base = std::numeric_limits<double>::infinity();
  t.kernels[1]->terms[0]->coefficient = std::numeric_limits<double>::infinity();
  const std::string error = ValidateTarget(t).message();
  EXPECT_NE(error.find("a number is infinite"), std::string::npos) << error;
  EXPECT_NE(error.find("term 0 coefficient is infinite"), std::string::npos)
      << error;
}

// A finite but absurd coefficient (the device_program fuzzer's 3.7e39 on
// layernorm) must be refused, not cast to int64.
TEST(CostModelLimitTest, RefusesCallsBeyondTheCycleLimit) {
  fb::TargetT t = LoadTestTarget("ipu21");
  for (auto& k : t.kernels) {
    if (k->kernel == "layernorm") k->terms[0]->coefficient = 3.7e39;
  }
  StatusOr<CostModel> model = CostModel::Create(t);
  ASSERT_TRUE(model.ok()) << model.status().message();
  StatusOr<int64_t> c = model->Cycles("layernorm", {{"rows", 1}, {"w", 1152}});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kBadInput);
  EXPECT_NE(c.status().message().find("more than 2^40"), std::string::npos)
      << c.status().message();
}

TEST(RequiredKernelsTest, MatchesMachineTable) {
  EXPECT_EQ(RequiredKernels().size(), 19u);
  fb::TargetT t = LoadTestTarget("ipu21");
  EXPECT_EQ(t.kernels.size(), RequiredKernels().size());
}

}  // namespace
}  // namespace tilec::kernels
