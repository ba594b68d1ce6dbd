#include "kernels/fused_body.h"

#include <gtest/gtest.h>

#include "kernels/test_target.h"

namespace tilec::kernels {
namespace {

fb::FusedStepT Step(fb::FusedStepKind kind, int operand = -1) {
  fb::FusedStepT s;
  s.kind = kind;
  s.operand = operand;
  return s;
}

fb::FusedStepT CastTo(fb::DType dtype, int exp) {
  fb::FusedStepT s = Step(fb::FusedStepKind::Cast);
  s.dtype = dtype;
  s.fp8_scale_exp = exp;
  return s;
}

fb::FusedStepT Fn(fb::FusedStepKind kind, fb::ElementwiseFn fn,
                  int operand = -1,
                  fb::Broadcast broadcast = fb::Broadcast::Full,
                  bool operand_first = false) {
  fb::FusedStepT s = Step(kind, operand);
  s.fn = fn;
  s.broadcast = broadcast;
  s.operand_first = operand_first;
  return s;
}

std::vector<BodyKernel> Compile(const std::vector<fb::FusedStepT>& steps,
                                size_t operands, size_t results = 1) {
  StatusOr<std::vector<BodyKernel>> calls =
      CompileBody(steps, operands, results, "op 7 (t)");
  EXPECT_TRUE(calls.ok()) << calls.status().message();
  return calls.ok() ? *calls : std::vector<BodyKernel>{};
}

TEST(FusedBodyTest, BiasThenGeluIsOneKernel) {
  const auto calls = Compile({Step(fb::FusedStepKind::BiasAdd, 1),
                              Step(fb::FusedStepKind::Gelu)},
                             2);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].kernel, "bias_gelu");
  EXPECT_TRUE(calls[0].bias);
  EXPECT_EQ(calls[0].operand, 1);
  EXPECT_EQ(calls[0].end_step, 2);
}

TEST(FusedBodyTest, CastAfterBiasGeluIsFoldedIn) {
  const auto calls =
      Compile({Step(fb::FusedStepKind::BiasAdd, 1),
               Step(fb::FusedStepKind::Gelu), CastTo(fb::DType::FP8E4M3, 4)},
              2);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].kernel, "bias_gelu");
  EXPECT_EQ(calls[0].dtype, fb::DType::FP8E4M3);
  EXPECT_EQ(calls[0].scale_exp, 4);
}

// The disagreement this file ended: the planner priced ResidualAdd then
// Moments as add + ln_moments while the lowering emitted residual_moments.
// One definition gives one kernel, priced by residual_moments' formula.
TEST(FusedBodyTest, ResidualAddThenMomentsIsResidualMoments) {
  const auto calls = Compile({Step(fb::FusedStepKind::ResidualAdd, 1),
                              Step(fb::FusedStepKind::Moments)},
                             2, 2);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].kernel, "residual_moments");
  EXPECT_TRUE(calls[0].moments);
  StatusOr<CostModel> model = CostModel::Create(LoadTestTarget("ipu21"));
  ASSERT_TRUE(model.ok());
  StatusOr<int64_t> fused =
      BodyKernelCycles(*model, calls[0], fb::DType::F16, 1, 1152);
  ASSERT_TRUE(fused.ok()) << fused.status().message();
  // docs/machine.md: 250 + rows (40 + 7 ceil(w/2)).
  EXPECT_EQ(*fused, 250 + 1 * (40 + 7 * 576));
}

TEST(FusedBodyTest, UnpairedStepsAreTheirOwnKernels) {
  const auto calls =
      Compile({Step(fb::FusedStepKind::BiasAdd, 1),
               Step(fb::FusedStepKind::ResidualAdd, 2),
               CastTo(fb::DType::FP8E4M3, 3), Step(fb::FusedStepKind::Gelu)},
              3);
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_EQ(BodyKernelNames(calls), "bias_add+add+cast+gelu");
  EXPECT_TRUE(calls[1].binary);
  // Temporaries stay F32 except where the body casts; the last call writes
  // the result's dtype.
  EXPECT_EQ(BodyKernelOutput(calls, 0, fb::DType::F16), fb::DType::F32);
  EXPECT_EQ(BodyKernelOutput(calls, 2, fb::DType::F16), fb::DType::FP8E4M3);
  EXPECT_EQ(BodyKernelOutput(calls, 3, fb::DType::F16), fb::DType::F16);
}

TEST(FusedBodyTest, TrailingMomentsReadTheStoredValue) {
  const auto calls = Compile(
      {Step(fb::FusedStepKind::Gelu), Step(fb::FusedStepKind::Moments)}, 1, 2);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[1].kernel, "ln_moments");
  EXPECT_EQ(BodyKernelOutput(calls, 0, fb::DType::F16), fb::DType::F16);
}

TEST(FusedBodyTest, RefusesWhatNoKernelRuns) {
  const std::vector<std::pair<std::vector<fb::FusedStepT>, std::string>>
      bad = {
          {{}, "empty fused body"},
          {{Fn(fb::FusedStepKind::Unary, fb::ElementwiseFn::Mul)},
           "a Unary step with the binary function Mul"},
          {{Fn(fb::FusedStepKind::Binary, fb::ElementwiseFn::Relu, 1)},
           "a Binary step with the unary function Relu"},
          {{Fn(fb::FusedStepKind::Binary, fb::ElementwiseFn::Sub)},
           "names operand -1 of 2"},
          {{Step(fb::FusedStepKind::BiasAdd, 3)}, "names operand 3 of 2"},
          {{Step(fb::FusedStepKind::Moments), Step(fb::FusedStepKind::Gelu)},
           "must be the body's last"},
          {{Step(fb::FusedStepKind::Moments)}, "has no value"},
      };
  for (const auto& [steps, message] : bad) {
    StatusOr<std::vector<BodyKernel>> calls = CompileBody(steps, 2, 2, "op 7");
    ASSERT_FALSE(calls.ok()) << message;
    EXPECT_NE(calls.status().message().find(message), std::string::npos)
        << calls.status().message();
    EXPECT_EQ(calls.status().message().rfind("op 7: ", 0), 0u);
  }
  // One result for a body with Moments (or two without) is refused too.
  EXPECT_FALSE(CompileBody({Step(fb::FusedStepKind::ResidualAdd, 1),
                            Step(fb::FusedStepKind::Moments)},
                           2, 1, "op 7")
                   .ok());
}

// Each general step is one call; the row broadcast reads its operand as a
// [w] row (the planner's per-column slot), a full operand as a second
// input.
TEST(FusedBodyTest, GeneralStepsAreOneCallEach) {
  fb::FusedStepT scale = Step(fb::FusedStepKind::Scale);
  scale.scale = 0.125f;
  const fb::FusedStepT row_div =
      Fn(fb::FusedStepKind::Binary, fb::ElementwiseFn::Div, 1,
         fb::Broadcast::Row, /*operand_first=*/true);
  const fb::FusedStepT full_mul =
      Fn(fb::FusedStepKind::Binary, fb::ElementwiseFn::Mul, 2);
  const auto calls =
      Compile({scale, Fn(fb::FusedStepKind::Unary, fb::ElementwiseFn::Sigmoid),
               row_div, full_mul},
              3);
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_EQ(BodyKernelNames(calls), "scale+unary+binary_row+binary");
  EXPECT_EQ(BodyKernelFparams(calls[0]), (std::vector<float>{0.125f}));
  EXPECT_EQ(BodyKernelParams(calls[1], 2, 8),
            (std::vector<int64_t>{2, 8, 8}));
  EXPECT_TRUE(calls[2].bias && !calls[2].binary);
  EXPECT_TRUE(ReadsRow(row_div));
  EXPECT_FALSE(ReadsRow(full_mul));
  EXPECT_EQ(BodyKernelParams(calls[2], 2, 8),
            (std::vector<int64_t>{2, 8, 3, 1}));
  EXPECT_TRUE(calls[3].binary && !calls[3].bias);
  EXPECT_EQ(calls[3].operand, 2);
  EXPECT_EQ(BodyKernelParams(calls[3], 2, 8),
            (std::vector<int64_t>{2, 8, 2, 0}));
  // Priced through the registry as the simulator charges them (ipu21,
  // n = 16: add 200 + 4 * 4, gelu 300 + 366).
  StatusOr<CostModel> model = CostModel::Create(LoadTestTarget("ipu21"));
  ASSERT_TRUE(model.ok());
  const int64_t want[] = {216, 666, 666 + 216, 216};
  for (size_t i = 0; i < calls.size(); ++i) {
    StatusOr<int64_t> c =
        BodyKernelCycles(*model, calls[i], fb::DType::F16, 2, 8);
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_EQ(*c, want[i]) << calls[i].kernel;
  }
}

// A column broadcast is binary_col, reading its operand as [rows, 1] (the
// planner's per-row slot): it needs row structure, as a row operand does.
TEST(FusedBodyTest, ColumnBroadcastIsBinaryCol) {
  const fb::FusedStepT col_sub =
      Fn(fb::FusedStepKind::Binary, fb::ElementwiseFn::Sub, 1,
         fb::Broadcast::Column, /*operand_first=*/true);
  const auto calls = Compile(
      {col_sub, Fn(fb::FusedStepKind::Unary, fb::ElementwiseFn::Relu)}, 2);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(BodyKernelNames(calls), "binary_col+unary");
  EXPECT_TRUE(calls[0].column && !calls[0].bias && !calls[0].binary);
  EXPECT_EQ(calls[0].operand, 1);
  EXPECT_TRUE(ReadsColumn(col_sub));
  EXPECT_FALSE(ReadsRow(col_sub));
  EXPECT_FALSE(RowFree(calls[0]));
  EXPECT_TRUE(RowFree(calls[1]));
  EXPECT_EQ(BodyKernelParams(calls[0], 2, 8),
            (std::vector<int64_t>{2, 8, 1, 1}));
  // Priced as a row broadcast of the same function (ipu21, n = 16: add
  // 200 + 4 * 4).
  StatusOr<CostModel> model = CostModel::Create(LoadTestTarget("ipu21"));
  ASSERT_TRUE(model.ok());
  StatusOr<int64_t> c =
      BodyKernelCycles(*model, calls[0], fb::DType::F16, 2, 8);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(*c, 216);
  // A column step naming no operand is refused like any binary step.
  fb::FusedStepT bad = col_sub;
  bad.operand = 3;
  EXPECT_FALSE(CompileBody({bad}, 2, 1, "op 7").ok());
}

TEST(FusedBodyTest, CyclesFollowTheOutputVariant) {
  StatusOr<CostModel> model = CostModel::Create(LoadTestTarget("ipu21"));
  ASSERT_TRUE(model.ok());
  BodyKernel call;
  call.kernel = "bias_gelu";
  call.operand = 1;
  call.bias = true;
  // docs/machine.md's formulas on 1 x 2152: 8,550 for F16 (as measured) and
  // 480 + 25 * 538 = 13,930 for an FP8 output (13,776 measured).
  EXPECT_EQ(*BodyKernelCycles(*model, call, fb::DType::F16, 1, 2152), 8550);
  EXPECT_EQ(*BodyKernelCycles(*model, call, fb::DType::FP8E4M3, 1, 2152),
            13930);
  EXPECT_EQ(BodyKernelParams(call, 3, 8), (std::vector<int64_t>{3, 8, 0}));
}

}  // namespace
}  // namespace tilec::kernels
