// Per-tile GEMM decisions and their cycles, worked out by hand from
// docs/machine.md's formulas on ipu21 (copy: 288 per call + 1 per 8 B; F16
// GEMM: 294 + ceil(K/16) * ceil(N/16) * (4M + 160)).

#include "passes/core/tile_plan.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "formats/ir.h"
#include "kernels/kernels.h"

namespace tilec::passes {
namespace {

Box B2(int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  Box b;
  b.rank = 2;
  b.begin = {r0, c0, 0, 0};
  b.end = {r1, c1, 0, 0};
  return b;
}

struct Fixture {
  Fixture() {
    EXPECT_TRUE(ir::LoadTarget("ipu21", &target).ok());
    model = *kernels::CostModel::Create(target);
  }
  fb::TargetT target;
  std::optional<kernels::CostModel> model;
};

// [146, 538] x [538, 64] on m1 x k2 x n1: tile 0's panel is rows [0, 146)
// x K [0, 269), its block 146 x 269 x 64. One call: 294 + ceil(269/16) *
// ceil(64/16) * (4*146 + 160) = 294 + 17 * 4 * 744 = 50,886.
GemmGrid Grid() {
  return MakeGemmGrid(146, 538, 64, 1, 2, 1, 0, 1, fb::Staging::Complete, 0, 1);
}

TEST(TilePlanTest, StridedLocalPartIsOneCopyPerRow) {
  Fixture f;
  const GemmGrid g = Grid();
  GemmTilePlanner planner(g, *f.model, kernels::DType::kF16, 2, 8);
  EXPECT_EQ(*planner.Gemm(146, 269, 64), 50886);
  // The tile holds rows [0, 92) x columns [100, 124) of A (F16) and copies
  // them into its panel: strided on the panel side, one copy per row of
  // 24 * 2 = 48 B: 92 * (288 + 6) = 27,048.
  const Segments held = {{B2(0, 92, 100, 124), 0}};
  const std::vector<Box> local = {B2(0, 92, 100, 124)};
  GemmTileInput in;
  in.a_storage = &held;
  in.local = local;
  StatusOr<GemmTilePlan> plan = planner.Plan(in);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_EQ(plan->chunks.size(), 1u);
  EXPECT_FALSE(plan->aliased);
  EXPECT_FALSE(plan->k_pieced);
  EXPECT_EQ(plan->chunks[0].copy_runs, 92);
  EXPECT_EQ(plan->chunks[0].copy_cycles, 92 * (288 + 6));
  EXPECT_EQ(plan->chunks[0].gemm_cycles, 50886);

  // K pieces cut the panel at columns 100 and 124: the part is one piece,
  // one copy of 92 * 48 = 4,416 B (288 + 552 = 840), for three calls of K
  // 100, 24, 145: 3 * 294 + (7 + 2 + 10) * 4 * 744 = 57,426. 58,266 <
  // 50,886 + 27,048: the tile takes them.
  in.k_pieces = true;
  plan = planner.Plan(in);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->k_pieced);
  EXPECT_EQ(plan->chunks[0].cuts, (std::vector<int64_t>{0, 100, 124, 269}));
  EXPECT_EQ(plan->chunks[0].copy_cycles, 840);
  EXPECT_EQ(plan->chunks[0].gemm_cycles, 57426);
  EXPECT_EQ(plan->chunks[0].calls, 3);
  // Both figures are kept: the chunk as one panel.
  EXPECT_EQ(plan->chunks[0].whole_copy_cycles, 27048);
  EXPECT_EQ(plan->chunks[0].whole_gemm_cycles, 50886);
}

TEST(TilePlanTest, KPiecesFollowTheStoredPieces) {
  Fixture f;
  const GemmGrid g = Grid();
  GemmTilePlanner planner(g, *f.model, kernels::DType::kF16, 2, 8);
  // The same part stored as two pieces, columns [100, 120) and [120, 124)
  // (an output range boundary of the GEMM that produced it). One panel:
  // one copy per row of each piece, 92 * (288 + 40/8) + 92 * (288 + 8/8)
  // = 53,544.
  const Segments held = AlignedPieces(
      std::vector<Box>{B2(0, 92, 100, 120), B2(0, 92, 120, 124)}, 2, 8);
  const std::vector<Box> local = {B2(0, 92, 100, 124)};
  GemmTileInput in;
  in.a_storage = &held;
  in.local = local;
  in.k_pieces = true;
  StatusOr<GemmTilePlan> plan = planner.Plan(in);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->chunks[0].whole_copy_cycles, 92 * 293 + 92 * 289);
  // K pieces at the stored pieces (100, 120, 124): one copy each, 288 +
  // 3680/8 = 748 and 288 + 736/8 = 380; four calls of K 100, 20, 4, 145:
  // 4 * 294 + (7 + 2 + 1 + 10) * 4 * 744 = 60,696.
  EXPECT_TRUE(plan->k_pieced);
  EXPECT_EQ(plan->chunks[0].cuts,
            (std::vector<int64_t>{0, 100, 120, 124, 269}));
  EXPECT_EQ(plan->chunks[0].copy_runs, 2);
  EXPECT_EQ(plan->chunks[0].copy_cycles, 748 + 380);
  EXPECT_EQ(plan->chunks[0].gemm_cycles, 60696);
}

TEST(TilePlanTest, WholePanelHeldContiguouslyIsUsedInPlace) {
  Fixture f;
  const GemmGrid g = Grid();
  GemmTilePlanner planner(g, *f.model, kernels::DType::kF16, 2, 8);
  const Segments held = {{B2(0, 146, 0, 269), 0}};
  const std::vector<Box> local = {B2(0, 146, 0, 269)};
  GemmTileInput in;
  in.a_storage = &held;
  in.local = local;
  StatusOr<GemmTilePlan> plan = planner.Plan(in);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->aliased);
  EXPECT_EQ(plan->chunks[0].copy_cycles, 0);
  // One call over the whole block.
  EXPECT_EQ(plan->chunks[0].calls, 1);
  EXPECT_EQ(plan->chunks[0].gemm_cycles, 50886);
}

// m2 x k3 x n2 over [10, 48] x [48, 32]: tile (mi, ki, ni) is
// ((mi*3 + ki)*2 + ni); block rows 5 each, reduced 2 + 2 + 1 by ki.
TEST(TilePlanTest, GridPlacesOperandsAndTheReducedRows) {
  const GemmGrid g =
      MakeGemmGrid(10, 48, 32, 2, 3, 2, 0, 1, fb::Staging::Complete, 0, 1);
  EXPECT_EQ(g.Tile(1, 2, 1), 11);
  EXPECT_EQ(g.Tile(0, 1, 0), 2);
  // Each grid tile holds A's block (mi, ki), B's block (ki, ni) and
  // reduces its rows of C's block (mi, ni).
  for (int mi = 0; mi < 2; ++mi) {
    for (int ki = 0; ki < 3; ++ki) {
      for (int ni = 0; ni < 2; ++ni) {
        const int t = g.Tile(mi, ki, ni);
        const std::vector<int64_t> a_shape = {10, 48}, b_shape = {48, 32},
                                   c_shape = {10, 32};
        EXPECT_EQ(HeldBoxes(g.ANeeded(), a_shape, t),
                  std::vector<Box>{g.ABox(mi, ki)});
        EXPECT_EQ(HeldBoxes(g.BNeeded(), b_shape, t),
                  std::vector<Box>{g.BBox(ki, ni)});
        const Box result = g.ResultBox(mi, ki, ni);
        EXPECT_EQ(HeldBoxes(g.ResultOwnership(), c_shape, t),
                  result.Empty() ? std::vector<Box>{} : std::vector<Box>{result});
      }
    }
  }
  EXPECT_EQ(g.ResultBox(0, 2, 0), B2(4, 5, 0, 16));
  // 5 rows split 2, 2, 1 is not the balanced split of 10 into 6 (2, 2, 2,
  // 2, 1, 1): the result needs sub-partitions.
  EXPECT_EQ(FormatOwnership(g.ResultOwnership()),
            "blocked(2x2, sub=3x1, order=0,2,1,3,4)");
  // 12 rows over m2 x k3 do split as 12 over 6.
  const GemmGrid even =
      MakeGemmGrid(12, 48, 32, 2, 3, 2, 0, 1, fb::Staging::Complete, 0, 1);
  EXPECT_EQ(FormatOwnership(even.ResultOwnership()), "blocked(6x2)");
}

// Serial steps cut each block's rows: blocks of 5 and 4 rows over m2 (9
// rows) in 3 steps are 2 + 2 + 1 and 2 + 1 + 1 rows; in 6 steps the last
// steps are empty. A step's result rows are the tile's reduced rows within
// it: with k3 tile ki reduces rows 2 + 2 + 1 of block 0.
TEST(TilePlanTest, SerialStepsCutEachBlocksRows) {
  const GemmGrid g =
      MakeGemmGrid(9, 48, 32, 2, 3, 2, 0, 1, fb::Staging::Complete, 0, 1, 3);
  using Runs = GemmGrid::RowRuns;
  EXPECT_EQ(g.StepRuns(0, 0), (Runs{{0, 2}}));
  EXPECT_EQ(g.StepRuns(0, 2), (Runs{{4, 5}}));
  EXPECT_EQ(g.StepRuns(1, 1), (Runs{{7, 8}}));
  EXPECT_EQ(g.StepRowCount(1, 0), 2);
  EXPECT_EQ(g.PanelRow(1, 1, 7), 0);
  EXPECT_EQ(g.StepPanel(0, 1, 16, 32), (Segments{{B2(2, 4, 16, 32), 0}}));
  // Block 0's rows 0-1 go to ki 0, 2-3 to ki 1, 4 to ki 2.
  EXPECT_EQ(g.StepResultBox(0, 0, 0, 0), B2(0, 2, 0, 16));
  EXPECT_TRUE(g.StepResultBox(0, 0, 0, 1).Empty());
  EXPECT_EQ(g.StepResultBox(0, 1, 0, 1), B2(2, 4, 0, 16));
  EXPECT_EQ(g.StepResultBox(0, 2, 0, 2), B2(4, 5, 0, 16));
  EXPECT_EQ(g.MostStepResultRows(0, 0), 2);
  const GemmGrid many =
      MakeGemmGrid(9, 48, 32, 2, 3, 2, 0, 1, fb::Staging::Complete, 0, 1, 6);
  EXPECT_EQ(many.StepRuns(1, 3), (Runs{{8, 9}}));
  EXPECT_TRUE(many.StepRuns(1, 4).empty());
  EXPECT_EQ(many.StepRowCount(1, 5), 0);
  // One step is the whole block.
  const GemmGrid one =
      MakeGemmGrid(9, 48, 32, 2, 3, 2, 0, 1, fb::Staging::Complete, 0, 1);
  EXPECT_EQ(one.StepRuns(1, 0), (Runs{{5, 9}}));
  EXPECT_EQ(one.MostStepRows(0), 5);
}

// Interleaved steps take the j-th part of every reducer's rows: block 0
// (rows 0-4, reduced as 0-1, 2-3, 4 by k3) in 2 steps is rows 0, 2, 4 and
// then 1, 3, stacked in that order in the step's panel and partial. Each
// reducer reduces one run in each step, so its remote partials hold one row
// where contiguous steps (0-2, 3-4) leave tile ki 0 both of its rows.
TEST(TilePlanTest, InterleavedStepsTakeEveryReducersPart) {
  const GemmGrid g = MakeGemmGrid(9, 48, 32, 2, 3, 2, 0, 1,
                                  fb::Staging::Complete, 0, 1, 2, true);
  using Runs = GemmGrid::RowRuns;
  EXPECT_TRUE(g.interleaved);
  EXPECT_EQ(g.StepRuns(0, 0), (Runs{{0, 1}, {2, 3}, {4, 5}}));
  EXPECT_EQ(g.StepRuns(0, 1), (Runs{{1, 2}, {3, 4}}));
  EXPECT_EQ(g.StepRowCount(0, 0), 3);
  EXPECT_EQ(g.StepRowCount(0, 1), 2);
  EXPECT_EQ(g.MostStepRows(0), 3);
  EXPECT_EQ(g.PanelRow(0, 0, 4), 2);
  EXPECT_EQ(g.PanelRow(0, 1, 3), 1);
  EXPECT_EQ(g.StepResultBox(0, 1, 0, 1), B2(3, 4, 0, 16));
  EXPECT_TRUE(g.StepResultBox(0, 2, 0, 1).Empty());
  EXPECT_EQ(g.MostStepResultRows(0, 0), 1);
  const GemmGrid contiguous =
      MakeGemmGrid(9, 48, 32, 2, 3, 2, 0, 1, fb::Staging::Complete, 0, 1, 2);
  EXPECT_EQ(contiguous.MostStepResultRows(0, 0), 2);
  // The partial stacks the runs; K pieces stack them per piece, each piece
  // aligned (3-byte runs: 0, 3, 6, then the next piece at 16).
  EXPECT_EQ(g.StepPanel(0, 0, 0, 16),
            (Segments{{B2(0, 1, 0, 16), 0},
                      {B2(2, 3, 0, 16), 16},
                      {B2(4, 5, 0, 16), 32}}));
  const int64_t cuts[] = {16, 19, 22};
  EXPECT_EQ(g.StepPanelPieces(0, 0, cuts, 1, 8),
            (Segments{{B2(0, 1, 16, 19), 0},
                      {B2(2, 3, 16, 19), 3},
                      {B2(4, 5, 16, 19), 6},
                      {B2(0, 1, 19, 22), 16},
                      {B2(2, 3, 19, 22), 19},
                      {B2(4, 5, 19, 22), 22}}));
  // Without a K split there is one part per block: contiguous.
  const GemmGrid k1 = MakeGemmGrid(9, 48, 32, 2, 1, 2, 0, 1,
                                   fb::Staging::Complete, 0, 1, 2, true);
  EXPECT_FALSE(k1.interleaved);
  EXPECT_EQ(k1.StepRuns(0, 0), (Runs{{0, 3}}));
}

TEST(TilePlanTest, PartialsAre16BitOnlyWhereEveryTileMakesOneCall) {
  const GemmGrid complete =
      MakeGemmGrid(10, 48, 32, 2, 3, 2, 0, 1, fb::Staging::Complete, 0, 1);
  const GemmGrid streamed =
      MakeGemmGrid(10, 48, 32, 2, 3, 2, 0, 1, fb::Staging::Streamed, 16, 1);
  EXPECT_EQ(PartialsDType(complete, fb::DType::F16, true), fb::DType::F16);
  EXPECT_EQ(PartialsDType(complete, fb::DType::F16, false), fb::DType::F32);
  EXPECT_EQ(PartialsDType(complete, fb::DType::F32, true), fb::DType::F32);
  EXPECT_EQ(PartialsDType(streamed, fb::DType::F16, true), fb::DType::F32);
}

}  // namespace
}  // namespace tilec::passes
