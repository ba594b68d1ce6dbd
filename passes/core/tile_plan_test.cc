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
  EXPECT_EQ(g.StepRows(0, 0), std::make_pair(int64_t{0}, int64_t{2}));
  EXPECT_EQ(g.StepRows(0, 2), std::make_pair(int64_t{4}, int64_t{5}));
  EXPECT_EQ(g.StepRows(1, 1), std::make_pair(int64_t{7}, int64_t{8}));
  EXPECT_EQ(g.StepABox(1, 2, 0), B2(5, 7, 32, 48));
  EXPECT_EQ(g.StepCBox(0, 1, 1), B2(2, 4, 16, 32));
  // Block 0's rows 0-1 go to ki 0, 2-3 to ki 1, 4 to ki 2.
  EXPECT_EQ(g.StepResultBox(0, 0, 0, 0), B2(0, 2, 0, 16));
  EXPECT_TRUE(g.StepResultBox(0, 0, 0, 1).Empty());
  EXPECT_EQ(g.StepResultBox(0, 1, 0, 1), B2(2, 4, 0, 16));
  EXPECT_EQ(g.StepResultBox(0, 2, 0, 2), B2(4, 5, 0, 16));
  const GemmGrid many =
      MakeGemmGrid(9, 48, 32, 2, 3, 2, 0, 1, fb::Staging::Complete, 0, 1, 6);
  EXPECT_EQ(many.StepRows(1, 3), std::make_pair(int64_t{8}, int64_t{9}));
  EXPECT_EQ(many.StepRows(1, 4), std::make_pair(int64_t{9}, int64_t{9}));
  EXPECT_TRUE(many.StepABox(1, 0, 5).Empty());
  // One step is the whole block.
  const GemmGrid one =
      MakeGemmGrid(9, 48, 32, 2, 3, 2, 0, 1, fb::Staging::Complete, 0, 1);
  EXPECT_EQ(one.StepABox(1, 1, 0), one.ABox(1, 1));
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
