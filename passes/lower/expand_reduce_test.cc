#include "passes/lower/expand_reduce.h"

#include <gtest/gtest.h>

#include "formats/ir.h"
#include "formats/target.h"
#include "formats/print.h"
#include "passes/lower/emit_device.h"
#include "passes/lower/hand_plan.h"
#include "passes/plan/planner.h"
#include "passes/plan/test_modules.h"

namespace tilec::lower {
namespace {

using testing::GemmShape;
using testing::MlpPlan;

fb::ModuleT Planned(const MlpPlan& plan, int64_t tokens, int64_t width,
                    int64_t mlp) {
  fb::ModuleT m = testing::Import("siglip-so400m-384", "mlp-block", "tiny",
                                  tokens, width, mlp, 1);
  testing::PlanMlpBlock(&m, plan);
  return m;
}

const fb::PassRunT& LastRun(const fb::ModuleT& m) { return *m.log.back(); }

std::string Decisions(const fb::ModuleT& m) {
  std::string out;
  for (const auto& d : LastRun(m).decisions) out += ir::DecisionText(*d) + "\n";
  return out;
}

const fb::DecisionT* FindDecision(const fb::ModuleT& m, uint32_t op,
                                  const std::string& action_prefix) {
  for (const auto& d : LastRun(m).decisions) {
    if (!d->ops.empty() && d->ops[0] == op &&
        d->action.rfind(action_prefix, 0) == 0) {
      return d.get();
    }
  }
  return nullptr;
}

TEST(ExpandReduceTest, RecordsEveryReductionWithItsNumbers) {
  MlpPlan plan;
  plan.up = GemmShape{2, 2, 2};
  plan.down = GemmShape{2, 2, 4};
  fb::ModuleT m = Planned(plan, 12, 32, 64);
  ASSERT_TRUE(ExpandReducePass().Run(&m).status().ok());
  const fb::OperationT* down = testing::FindOp(&m, "l0.mlp.down");
  ASSERT_NE(down->reduction, nullptr);
  const fb::ReductionT& r = *down->reduction;
  EXPECT_EQ(r.partials, 4);
  EXPECT_TRUE(r.direct_seed_read);
  EXPECT_TRUE(r.direct_final_write);
  ASSERT_EQ(r.scratch.size(), 3u);
  EXPECT_EQ(r.scratch[0]->role, fb::ScratchRole::Initial);
  EXPECT_TRUE(r.scratch[0]->elided);
  EXPECT_EQ(r.scratch[1]->role, fb::ScratchRole::RemotePartials);
  // 3 remote partials of a tile's 2 rows (6 rows of a block over 4 tiles:
  // 2, 2, 1, 1) x 16 columns in F16.
  EXPECT_EQ(r.scratch[1]->bytes_per_tile, 3 * 2 * 16 * 2);
  ASSERT_EQ(r.stages.size(), 1u);
  EXPECT_EQ(r.stages[0]->partials, 3);
  // 16-bit partials halve the exchange; the decision carries both numbers.
  EXPECT_EQ(r.scratch[1]->dtype, fb::DType::F16);
  const fb::DecisionT* f16 = FindDecision(m, down->id, "keep the 4 partials in f16");
  ASSERT_NE(f16, nullptr) << Decisions(m);
  EXPECT_EQ(f16->outcome, fb::Outcome::Accepted);
  EXPECT_LE(f16->cycles_after, f16->cycles_before);
  EXPECT_GT(f16->cycles_before, 0);
  // Only K-split GEMMs get reductions.
  EXPECT_EQ(testing::FindOp(&m, "l0.mlp.up_bias")->reduction, nullptr);
}

TEST(ExpandReduceTest, FlagAndDecisionLimitKeepF32Partials) {
  MlpPlan plan;
  plan.up = GemmShape{2, 2, 2};
  plan.down = GemmShape{2, 2, 4};
  for (int variant = 0; variant < 2; ++variant) {
    fb::ModuleT m = Planned(plan, 12, 32, 64);
    ExpandReduceOptions o;
    passes::PassOptions common;
    if (variant == 0) {
      o.allow_16bit_partials = false;
    } else {
      common.max_decisions = 0;
    }
    ASSERT_TRUE(ExpandReducePass(o, common).Run(&m).status().ok());
    const fb::OperationT* down = testing::FindOp(&m, "l0.mlp.down");
    EXPECT_EQ(down->reduction->scratch[1]->dtype, fb::DType::F32);
    const fb::DecisionT* f16 = FindDecision(m, down->id, "keep the 4 partials in f16");
    ASSERT_NE(f16, nullptr) << Decisions(m);
    EXPECT_EQ(f16->outcome, fb::Outcome::Rejected);
    EXPECT_FALSE(f16->reason.empty());
    // Still computes the graph.
    ASSERT_TRUE(EmitDevicePass().Run(&m).status().ok());
    testing::SimCheck check;
    ASSERT_TRUE(testing::SimulateAgainstReference(
                    m, sim::Tolerance{2e-2, 1e-2, 0.9999}, &check)
                    .ok());
    EXPECT_TRUE(check.pass) << check.message;
  }
}

TEST(ExpandReduceTest, StagedPartialsSimulateToTheSameOutput) {
  MlpPlan plan;
  plan.up = GemmShape{2, 2, 2};
  plan.down = GemmShape{2, 2, 4};
  std::map<uint32_t, std::vector<float>> outputs[2];
  int64_t phases[2];
  for (int per_epoch : {0, 1}) {
    fb::ModuleT m = Planned(plan, 12, 32, 64);
    ExpandReduceOptions o;
    o.partials_per_epoch = per_epoch;
    ASSERT_TRUE(ExpandReducePass(o).Run(&m).status().ok());
    const fb::ReductionT& r = *testing::FindOp(&m, "l0.mlp.down")->reduction;
    EXPECT_EQ(r.stages.size(), per_epoch == 1 ? 3u : 1u);
    ASSERT_TRUE(EmitDevicePass().Run(&m).status().ok());
    testing::SimCheck check;
    ASSERT_TRUE(testing::SimulateAgainstReference(
                    m, sim::Tolerance{2e-2, 1e-2, 0.9999}, &check)
                    .ok());
    EXPECT_TRUE(check.pass) << check.message;
    outputs[per_epoch] = check.result.outputs;
    phases[per_epoch] = check.result.exchange_phases;
  }
  // Epochs change where partials wait, not the order they are summed in.
  EXPECT_EQ(outputs[0], outputs[1]);
  EXPECT_EQ(phases[1], phases[0] + 2);
}

TEST(ExpandReduceTest, MemoryPressureStagesRemotePartials) {
  // Down GEMM [48 x 256] x [256 x 128] with K over all 16 tiles in F32
  // partials: each tile's 48 x 128 partial (24 KiB) plus 15 remote partials
  // of its 3 x 128 rows (22.5 KiB) do not fit tiny's 64 KiB of tensor
  // memory with the rest; fewer per phase do.
  MlpPlan plan;
  plan.ln_parts = 8;
  plan.up = GemmShape{2, 8, 1};
  plan.down = GemmShape{1, 1, 16};
  fb::ModuleT m = Planned(plan, 48, 128, 256);
  ExpandReduceOptions f32;
  f32.allow_16bit_partials = false;
  ASSERT_TRUE(ExpandReducePass(f32).Run(&m).status().ok());
  const fb::OperationT* down = testing::FindOp(&m, "l0.mlp.down");
  const fb::DecisionT* epochs = FindDecision(m, down->id, "receive ");
  ASSERT_NE(epochs, nullptr) << Decisions(m);
  EXPECT_EQ(epochs->outcome, fb::Outcome::Accepted) << Decisions(m);
  EXPECT_GT(epochs->bytes_before, ir::MaxTileTensorBytes(*m.target));
  EXPECT_LE(epochs->bytes_after, ir::MaxTileTensorBytes(*m.target));
  EXPECT_GT(epochs->cycles_after, epochs->cycles_before);  // more phases
  EXPECT_GT(down->reduction->stages.size(), 1u);
  ASSERT_TRUE(EmitDevicePass().Run(&m).status().ok());
  testing::SimCheck check;
  ASSERT_TRUE(testing::SimulateAgainstReference(
                  m, sim::Tolerance{2e-2, 1e-2, 0.9999}, &check)
                  .ok());
  EXPECT_TRUE(check.pass) << check.message;
}


// A rolled graph (docs/repeat.md): the body's reductions are recorded like
// any others, and the repeat, its loop edge included, stays valid.
TEST(ExpandReduceTest, KeepsARepeatValid) {
  fb::ModuleT m = plan::TinyBlocks(3, true);
  plan::PlannerOptions po;
  po.attempts = 0;
  po.recipe_text =
      "op 4: gemm m=2 k=2 n=4 staging=complete\n"
      "op 6: elementwise blocked(2x8)\n";
  po.recipe_name = "test.recipe";
  ASSERT_TRUE(plan::PlanOwnershipPass(po).Run(&m).ok());
  const fb::RepeatT before = *m.repeats[0];
  ASSERT_TRUE(ExpandReducePass().Run(&m).ok());
  const Status verified = ir::VerifyModule(m);
  ASSERT_TRUE(verified.ok()) << verified.message();
  ASSERT_EQ(m.repeats.size(), 1u);
  EXPECT_EQ(m.repeats[0]->carried_out, before.carried_out);
  EXPECT_EQ(m.repeats[0]->count, 3u);
  const fb::OperationT* down = testing::FindOp(&m, "l0.mlp.down");
  ASSERT_NE(down->reduction, nullptr);
  EXPECT_EQ(down->reduction->partials, 2);
  EXPECT_EQ(m.ops.back()->kind, fb::OpKind::Redistribute);  // the loop edge
  EXPECT_EQ(m.ops.back()->results[0], before.carried_out);
}

}  // namespace
}  // namespace tilec::lower
