#include "passes/core/row_plan.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>

#include "formats/ir.h"

namespace tilec::passes {
namespace {

// result element (row, column) -> (operand, source row) for every element a
// tile receives, checking that each arrives exactly once and from a tile
// that holds it.
void ExpectEveryElementOnce(const RowCopyPlan& plan,
                            std::span<const RowOperand> operands,
                            const fb::OwnershipT& result,
                            std::span<const int64_t> shape,
                            std::span<const ir::RowSegment> rows) {
  // Expected: per result row, its operand and source row.
  std::map<int64_t, std::pair<int, int64_t>> source;
  for (const ir::RowSegment& s : rows) {
    for (int64_t i = 0; i < s.count; ++i) {
      source[s.at + i] = {static_cast<int>(s.operand), s.first + i};
    }
  }
  std::map<std::tuple<int, int64_t, int64_t>, int> arrived;  // tile,row,col
  auto holds = [&](int k, int tile, int64_t row, int64_t col) {
    for (const Box& b :
         HeldBoxes(*operands[k].ownership, operands[k].shape, tile)) {
      if (row >= b.begin[0] && row < b.end[0] && col >= b.begin[1] &&
          col < b.end[1]) {
        return true;
      }
    }
    return false;
  };
  auto land = [&](int k, int from, const Box& box, int tile, int64_t shift) {
    for (int64_t r = box.begin[0]; r < box.end[0]; ++r) {
      for (int64_t c = box.begin[1]; c < box.end[1]; ++c) {
        EXPECT_TRUE(holds(k, from, r, c)) << "tile " << from << " row " << r;
        const auto& want = source.at(r + shift);
        EXPECT_EQ(want.first, k);
        EXPECT_EQ(want.second, r);
        ++arrived[{tile, r + shift, c}];
      }
    }
  };
  for (const RowTransfer& t : plan.transfers) {
    EXPECT_EQ(t.bytes, t.box.Elements() * 2);
    for (const RowDestination& d : t.destinations) {
      EXPECT_NE(d.tile, t.source_tile);
      land(t.operand, t.source_tile, t.box, d.tile, d.shift);
    }
  }
  for (const RowLocalCopy& c : plan.local_copies) {
    land(c.operand, c.tile, c.box, c.tile, c.shift);
  }
  int64_t expected = 0;
  ForEachHeldBoxes(result, shape, [&](int tile, std::span<const Box> boxes) {
    for (const Box& b : boxes) {
      expected += b.Elements();
      for (int64_t r = b.begin[0]; r < b.end[0]; ++r) {
        for (int64_t c = b.begin[1]; c < b.end[1]; ++c) {
          EXPECT_EQ((arrived[{tile, r, c}]), 1)
              << "tile " << tile << " row " << r << " col " << c;
        }
      }
    }
  });
  EXPECT_EQ(static_cast<int64_t>(arrived.size()), expected);
}

std::vector<ir::RowSegment> PrependClass(int64_t images, int64_t patches) {
  std::vector<ir::RowSegment> rows;
  for (int64_t b = 0; b < images; ++b) {
    rows.push_back({0, 0, 1, b * (patches + 1)});
    rows.push_back({1, b * patches, patches, b * (patches + 1) + 1});
  }
  return rows;
}

TEST(RowPlanTest, PrependClassTokenToEachImage) {
  const std::vector<int64_t> cls_shape = {1, 8}, patch_shape = {6, 8},
                             shape = {8, 8};
  const fb::OwnershipT cls = BlockedOwnership({1, 1}, 1, 5);
  const fb::OwnershipT patches = BlockedOwnership({3, 1});
  const fb::OwnershipT result = BlockedOwnership({4, 1});
  const std::vector<RowOperand> operands = {{&cls, cls_shape},
                                            {&patches, patch_shape}};
  const std::vector<ir::RowSegment> rows = PrependClass(2, 3);
  const RowCopyPlan plan = PlanRowCopies(operands, result, shape, rows, 2);
  ExpectEveryElementOnce(plan, operands, result, shape, rows);
  // The class token is one row on tile 5, wanted by the tiles holding rows
  // 0 (tile 0) and 4 (tile 2): one multicast.
  int class_transfers = 0;
  for (const RowTransfer& t : plan.transfers) {
    if (t.operand != 0) continue;
    ++class_transfers;
    EXPECT_EQ(t.source_tile, 5);
    ASSERT_EQ(t.destinations.size(), 2u);
    EXPECT_EQ(t.destinations[0], (RowDestination{0, 0}));
    EXPECT_EQ(t.destinations[1], (RowDestination{2, 4}));
  }
  EXPECT_EQ(class_transfers, 1);
  // Patch row 0 stays on tile 0 (its rows 0..1 become result rows 1..2).
  ASSERT_FALSE(plan.local_copies.empty());
  EXPECT_EQ(plan.local_copies[0].tile, 0);
  EXPECT_EQ(plan.local_copies[0].box, Box2(0, 1, 0, 8));
  EXPECT_EQ(plan.local_copies[0].shift, 1);
}

TEST(RowPlanTest, BroadcastTableOverTheBatchAndPickClassRows) {
  // A [3, 4] table over 4 images: result [12, 4] in 5 uneven row blocks,
  // from a flat home, so pieces cut rows and several land on one tile.
  const std::vector<int64_t> table_shape = {3, 4}, shape = {12, 4};
  const fb::OwnershipT home = FlatOwnership(3, 3);
  const fb::OwnershipT result = BlockedOwnership({5, 1});
  const std::vector<RowOperand> operands = {{&home, table_shape}};
  std::vector<ir::RowSegment> rows;
  for (int64_t b = 0; b < 4; ++b) rows.push_back({0, 0, 3, 3 * b});
  const RowCopyPlan plan = PlanRowCopies(operands, result, shape, rows, 2);
  ExpectEveryElementOnce(plan, operands, result, shape, rows);

  // Each image's class row (rows 0, 3, 6, 9) out of the [12, 4] tokens.
  const std::vector<int64_t> heads = {4, 4};
  const fb::OwnershipT tokens = BlockedOwnership({4, 2});
  const fb::OwnershipT picked = BlockedOwnership({2, 1}, 1, 6);
  const std::vector<RowOperand> x = {{&tokens, shape}};
  std::vector<ir::RowSegment> pick;
  for (int64_t b = 0; b < 4; ++b) pick.push_back({0, 3 * b, 1, b});
  const RowCopyPlan p = PlanRowCopies(x, picked, heads, pick, 2);
  ExpectEveryElementOnce(p, x, picked, heads, pick);
  // 4 rows x 2 column blocks; tile 7 holds row 9's right half itself.
  ASSERT_EQ(p.local_copies.size(), 1u);
  EXPECT_EQ(p.local_copies[0].tile, 7);
  EXPECT_EQ(p.local_copies[0].box, Box2(9, 10, 2, 4));
  EXPECT_EQ(p.local_copies[0].shift, -6);
  EXPECT_EQ(p.transfers.size(), 7u);
}

TEST(RowPlanTest, ReplicasShareTheSendingAndCostsFollowThePlan) {
  auto target = std::make_unique<fb::TargetT>();
  ASSERT_TRUE(ir::LoadTarget("tiny", target.get()).ok());
  StatusOr<kernels::CostModel> model = kernels::CostModel::Create(*target);
  ASSERT_TRUE(model.ok()) << model.status().message();
  // The table replicated on tiles 0 and 1; result rows on tiles 0..3.
  const std::vector<int64_t> table_shape = {4, 8}, shape = {8, 8};
  const fb::OwnershipT table = BlockedOwnership({1, 1}, 2);
  const fb::OwnershipT result = BlockedOwnership({4, 1});
  const std::vector<RowOperand> operands = {{&table, table_shape}};
  const std::vector<ir::RowSegment> rows = {{0, 0, 4, 0}, {0, 0, 4, 4}};
  const RowCopyPlan plan = PlanRowCopies(operands, result, shape, rows, 2);
  ExpectEveryElementOnce(plan, operands, result, shape, rows);
  std::set<int> senders;
  for (const RowTransfer& t : plan.transfers) senders.insert(t.source_tile);
  EXPECT_EQ(senders, (std::set<int>{0, 1}));
  const TransferCost cost =
      RowExchangeCost(plan, operands, result, shape, 2, *target);
  EXPECT_GE(cost.scheduled_cycles, cost.bound_cycles);
  EXPECT_GT(cost.phase_cycles, 0);
  EXPECT_EQ(cost.transfers, static_cast<int64_t>(plan.transfers.size()));
  int64_t received = 0;
  for (const RowTransfer& t : plan.transfers) {
    received += t.bytes * static_cast<int64_t>(t.destinations.size());
  }
  EXPECT_EQ(cost.bytes_received, received);
  int slowest = -1;
  StatusOr<int64_t> copies = RowCopyCycles(plan, operands, result, shape, 2,
                                           *model, &slowest);
  ASSERT_TRUE(copies.ok()) << copies.status().message();
  EXPECT_GT(*copies, 0);  // tiles 0 and 1 copy their own rows
  EXPECT_TRUE(slowest == 0 || slowest == 1);
}

// Blocks of every height in one operand: uneven row blocks, column blocks
// that span every row, flat parts that cut rows, replicas. Each piece must
// still come from a block its rows meet (the plan finds those by row).
TEST(RowPlanTest, EveryBlockARowRangeMeetsIsFound) {
  const std::vector<int64_t> rows_shape = {13, 8}, columns_shape = {9, 8},
                             flat_shape = {7, 8}, shape = {40, 8};
  const fb::OwnershipT by_rows = BlockedOwnership({5, 2}, 2, 3);
  const fb::OwnershipT by_columns = BlockedOwnership({1, 4}, 1, 20);
  const fb::OwnershipT flat = FlatOwnership(3, 6, 1);
  const std::vector<RowOperand> operands = {{&by_rows, rows_shape},
                                            {&by_columns, columns_shape},
                                            {&flat, flat_shape}};
  // Rows of each operand in pieces, out of order, one range twice.
  const std::vector<ir::RowSegment> rows = {
      {0, 4, 9, 0},  {1, 0, 9, 9},  {2, 2, 5, 18}, {0, 0, 4, 23},
      {2, 0, 2, 27}, {1, 3, 5, 29}, {0, 9, 4, 34}, {2, 4, 2, 38}};
  for (const fb::OwnershipT& result :
       {BlockedOwnership({7, 1}), BlockedOwnership({3, 2}, 2, 10),
        FlatOwnership(5, 9, 2)}) {
    const RowCopyPlan plan = PlanRowCopies(operands, result, shape, rows, 2);
    ExpectEveryElementOnce(plan, operands, result, shape, rows);
  }
}

TEST(RowPlanTest, ShiftRowsMovesOnlyTheRowAxis) {
  const Segments s = {{Box2(2, 4, 0, 8), 0}, {Box2(4, 5, 0, 3), 16}};
  const Segments t = ShiftRows(s, 3);
  EXPECT_EQ(t[0].box, Box2(5, 7, 0, 8));
  EXPECT_EQ(t[1].box, Box2(7, 8, 0, 3));
  EXPECT_EQ(t[1].offset, 16);
}

}  // namespace
}  // namespace tilec::passes
