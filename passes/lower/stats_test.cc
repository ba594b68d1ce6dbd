// Row statistics over column slices (docs/lowering.md, "Statistics"):
// LayerNorm whose tiles hold parts of rows, Moments + Normalize, and a fused
// residual add + moments, all on the tiny target against the reference.

#include <gtest/gtest.h>

#include "formats/ir.h"
#include "passes/core/ownership.h"
#include "passes/lower/emit_device.h"
#include "passes/lower/expand_reduce.h"
#include "passes/lower/hand_plan.h"

namespace tilec::lower {
namespace {

using passes::BlockedOwnership;

constexpr sim::Tolerance kDefault{2e-2, 1e-2, 0.9999};

// Lowers, emits and simulates; the program must use `kernel`.
void Check(fb::ModuleT* m, const std::string& kernel = "moments_combine") {
  Status s = ExpandReducePass().Run(m).status();
  ASSERT_TRUE(s.ok()) << s.message();
  EmitDevicePass emit;
  s = emit.Run(m).status();
  const EmitSummary& summary = emit.summary();
  ASSERT_TRUE(s.ok()) << s.message();
  testing::SimCheck check;
  s = testing::SimulateAgainstReference(*m, kDefault, &check);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(check.pass) << check.message;
  EXPECT_EQ(check.result.total_cycles, summary.predicted_cycles);
  int calls = 0;
  for (const auto& step : m->program->supersteps) {
    for (const auto& c : step->compute) calls += c->kernel == kernel;
  }
  EXPECT_GT(calls, 0) << "no " << kernel << " call";
}

std::unique_ptr<fb::OwnershipT> Own(const fb::OwnershipT& o) {
  return std::make_unique<fb::OwnershipT>(o);
}

fb::OwnershipT Replicated(std::vector<int32_t> parts, int reps) {
  return BlockedOwnership(std::move(parts), reps);
}

TEST(StatsTest, LayerNormOverColumnSlices) {
  fb::ModuleT m = testing::Import("siglip-so400m-384", "mlp-block", "tiny", 12,
                                  32, 64, 1);
  testing::MlpPlan plan;
  plan.up = testing::GemmShape{2, 2, 2};
  plan.down = testing::GemmShape{2, 2, 2};
  testing::PlanMlpBlock(&m, plan);
  // Re-plan the LayerNorm on 4 row blocks x 3 column slices (uneven: 32
  // columns over 3), x placed the same way.
  fb::OperationT* ln = testing::FindOp(&m, "l0.ln2");
  const fb::OwnershipT split = BlockedOwnership({4, 3});
  ln->recipe->layout = Own(split);
  testing::FindValue(&m, ln->results[0])->ownership = Own(split);
  testing::FindValue(&m, ln->operands[0])->ownership = Own(split);
  // The residual add reads x too: it gets its own redistribution.
  for (auto& op : m.ops) {
    if (op->kind == fb::OpKind::Redistribute &&
        op->operands[0] == ln->operands[0]) {
      op->recipe->layout = Own(*testing::FindValue(&m, op->results[0])->ownership);
    }
  }
  for (uint32_t id : {ln->operands[1], ln->operands[2]}) {
    testing::FindValue(&m, id)->ownership = Own(Replicated({1}, 12));
  }
  Check(&m);
}

// x -> Moments -> m; Normalize(x, m, gamma, beta) -> y.
fb::ModuleT MomentsGraph(const fb::OwnershipT& m_owner, bool fused) {
  fb::ModuleT m;
  m.target = std::make_unique<fb::TargetT>();
  EXPECT_TRUE(ir::LoadTarget("tiny", m.target.get()).ok());
  m.schema_version = ir::kSchemaVersion;
  const int64_t R = 11, W = 40;
  auto value = [&](const std::string& name, std::vector<int64_t> shape,
                   fb::ValueRole role, fb::DType dtype, uint64_t seed,
                   float mean, float stddev) {
    auto v = std::make_unique<fb::ValueT>();
    v->id = static_cast<uint32_t>(m.values.size());
    v->name = name;
    v->shape = std::move(shape);
    v->role = role;
    v->dtype = dtype;
    if (role == fb::ValueRole::Input || role == fb::ValueRole::Weight) {
      v->init = std::make_unique<fb::WeightInitT>();
      v->init->distribution = fb::Distribution::Gaussian;
      v->init->seed = seed;
      v->init->mean = mean;
      v->init->stddev = stddev;
    }
    m.values.push_back(std::move(v));
    return m.values.back()->id;
  };
  const fb::OwnershipT slices = BlockedOwnership({3, 4});
  const uint32_t x = value("x", {R, W}, fb::ValueRole::Input, fb::DType::F16, 5, 0.5f, 2);
  m.values[x]->ownership = Own(slices);
  uint32_t data = x;
  uint32_t mom;
  if (fused) {
    const uint32_t r = value("r", {R, W}, fb::ValueRole::Input, fb::DType::F16, 6, 0, 1);
    m.values[r]->ownership = Own(slices);
    data = value("sum", {R, W}, fb::ValueRole::Activation, fb::DType::F16, 0, 0, 0);
    m.values[data]->ownership = Own(slices);
    mom = value("moments", {R, 3}, fb::ValueRole::Activation, fb::DType::F32, 0, 0, 0);
    auto op = std::make_unique<fb::OperationT>();
    op->id = 0;
    op->kind = fb::OpKind::Fused;
    op->name = "residual_moments";
    op->operands = {x, r};
    op->results = {data, mom};
    auto add = std::make_unique<fb::FusedStepT>();
    add->kind = fb::FusedStepKind::ResidualAdd;
    add->operand = 1;
    auto mo = std::make_unique<fb::FusedStepT>();
    mo->kind = fb::FusedStepKind::Moments;
    op->body.push_back(std::move(add));
    op->body.push_back(std::move(mo));
    op->recipe = std::make_unique<fb::RecipeT>();
    op->recipe->kind = fb::RecipeKind::Elementwise;
    op->recipe->layout = Own(slices);
    m.ops.push_back(std::move(op));
  } else {
    mom = value("moments", {R, 3}, fb::ValueRole::Activation, fb::DType::F32, 0, 0, 0);
    auto op = std::make_unique<fb::OperationT>();
    op->id = 0;
    op->kind = fb::OpKind::Moments;
    op->name = "moments";
    op->operands = {x};
    op->results = {mom};
    op->recipe = std::make_unique<fb::RecipeT>();
    op->recipe->kind = fb::RecipeKind::Elementwise;
    op->recipe->layout = Own(slices);
    m.ops.push_back(std::move(op));
  }
  m.values[mom]->ownership = Own(m_owner);
  const uint32_t gamma = value("gamma", {W}, fb::ValueRole::Weight, fb::DType::F16, 7, 1, 0.1f);
  const uint32_t beta = value("beta", {W}, fb::ValueRole::Weight, fb::DType::F16, 8, 0, 0.1f);
  m.values[gamma]->ownership = Own(Replicated({1}, 12));
  m.values[beta]->ownership = Own(Replicated({1}, 12));
  const uint32_t y = value("y", {R, W}, fb::ValueRole::Output, fb::DType::F16, 0, 0, 0);
  m.values[y]->ownership = Own(slices);
  auto op = std::make_unique<fb::OperationT>();
  op->id = 1;
  op->kind = fb::OpKind::Normalize;
  op->name = "normalize";
  op->operands = {data, mom, gamma, beta};
  op->results = {y};
  op->eps = 1e-5f;
  op->recipe = std::make_unique<fb::RecipeT>();
  op->recipe->kind = fb::RecipeKind::Elementwise;
  op->recipe->layout = Own(slices);
  m.ops.push_back(std::move(op));
  // Normalize needs the moments of its rows on every slice's tile.
  fb::OwnershipT need = BlockedOwnership({3, 1}, 4);
  if (!passes::SamePlacement(m_owner, need, m.values[mom]->shape)) {
    testing::InsertRedistribute(&m, m.ops.back().get(), 1, need);
  }
  return m;
}

TEST(StatsTest, MomentsCombinedWhereNormalizeNeedsThem) {
  // Moments owned by every slice of their rows: an all-gather.
  fb::ModuleT m = MomentsGraph(BlockedOwnership({3, 1}, 4), false);
  Check(&m);
}

TEST(StatsTest, MomentsOnOneTilePerRowBlockThenRedistributed) {
  fb::ModuleT m = MomentsGraph(BlockedOwnership({3, 1}, 1, 12), false);
  Check(&m);
}

TEST(StatsTest, FusedResidualAddAndMomentsOverSlices) {
  fb::ModuleT m = MomentsGraph(BlockedOwnership({3, 1}, 4), true);
  Check(&m);
}

}  // namespace
}  // namespace tilec::lower
