#include "passes/core/split_row_plan.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "formats/ir.h"
#include "kernels/kernels.h"

namespace tilec::passes {
namespace {

TEST(SplitRowPlanTest, WholeRowsAreNotSplit) {
  const std::vector<int64_t> shape = {12, 32};
  EXPECT_FALSE(HasSplitRows(BlockedOwnership({4, 1}), shape));
  EXPECT_TRUE(HasSplitRows(BlockedOwnership({4, 2}), shape));
  EXPECT_FALSE(HasSplitRows(BlockedOwnership({1, 4, 2}),
                            std::vector<int64_t>{2, 12, 32}));
}

// blocked(3x2) over [12, 32]: tile 2r + c holds rows 4r.. and columns
// 16c..; each slice's partial goes to the other slice of its rows.
TEST(SplitRowPlanTest, EachPartialGoesToTheOtherSlicesOfItsRows) {
  const std::vector<int64_t> shape = {12, 32};
  StatusOr<SplitRowPlan> plan =
      PlanSplitRows(BlockedOwnership({3, 2}), shape, "op 0");
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_EQ(plan->slices.size(), 6u);
  ASSERT_EQ(plan->gathers.size(), 6u);
  for (size_t s = 0; s < plan->slices.size(); ++s) {
    const int t = plan->slices[s].tile;
    EXPECT_EQ(plan->groups[s], (std::vector<int>{t / 2 * 2, t / 2 * 2 + 1}));
  }
  // Asked for first by tile 1 (tile 0's partial), then by tile 0.
  EXPECT_EQ(plan->gathers[0].source_tile, 1);
  EXPECT_EQ(plan->gathers[0].destination_tiles, std::vector<int>{0});
  EXPECT_EQ(plan->gathers[1].source_tile, 0);
  EXPECT_EQ(plan->gathers[1].destination_tiles, std::vector<int>{1});
  EXPECT_EQ(plan->gathers[0].bytes, 4 * 3 * 4);
}

TEST(SplitRowPlanTest, PricesThePhasesTheLoweringRuns) {
  auto target = std::make_unique<fb::TargetT>();
  ASSERT_TRUE(ir::LoadTarget("tiny", target.get()).ok());
  StatusOr<kernels::CostModel> model = kernels::CostModel::Create(*target);
  ASSERT_TRUE(model.ok());
  const std::vector<int64_t> shape = {12, 32};
  StatusOr<SplitRowPlan> plan =
      PlanSplitRows(BlockedOwnership({3, 4}), shape, "op 0");
  ASSERT_TRUE(plan.ok());
  StatusOr<SplitRowCost> cost =
      PriceSplitRows(*plan, fb::DType::F16, *model, *target);
  ASSERT_TRUE(cost.ok()) << cost.status().message();
  const int64_t moments = *kernels::LnMomentsCycles(*model, 4, 8);
  const int64_t normalize =
      *kernels::CombineMomentsCycles(*model, 4, 4) +
      *kernels::NormalizeCycles(*model, kernels::DType::kF16, 4, 8);
  EXPECT_EQ(cost->moments, moments);
  EXPECT_EQ(cost->normalize, normalize);
  EXPECT_EQ(cost->compute, moments + normalize);
  EXPECT_EQ(cost->phases, 1);
  EXPECT_GT(cost->exchange.phase_cycles, target->sync_cycles);
  // Every tile receives the three other partials of its rows.
  EXPECT_EQ(cost->exchange.bytes_received, 12 * 3 * 4 * 3 * 4);
  // Its partial, three remote ones and the combined moments.
  EXPECT_EQ(cost->scratch[0], 5 * 4 * 3 * 4);
}

}  // namespace
}  // namespace tilec::passes
