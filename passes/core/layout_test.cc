#include "passes/core/layout.h"

#include <gtest/gtest.h>

#include <random>

#include "formats/ir.h"
#include "kernels/exchange_schedule.h"

namespace tilec::passes {
namespace {

Box B2(int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  Box b;
  b.rank = 2;
  b.begin = {r0, c0, 0, 0};
  b.end = {r1, c1, 0, 0};
  return b;
}

TEST(LayoutTest, SubBoxOfABlockIsOneRunPerRow) {
  const Segments block = {{B2(10, 14, 100, 108), 0}};  // 4 x 8 at 0
  std::vector<passes::Run> runs;
  ASSERT_TRUE(LocateRuns(B2(11, 13, 102, 105), block, &runs));
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0], (passes::Run{10, 10, 3}));  // row 11: (1 * 8 + 2)
  EXPECT_EQ(runs[1], (passes::Run{18, 18, 3}));
  EXPECT_FALSE(ContiguousOffset(B2(11, 13, 102, 105), block).has_value());
  // Whole rows merge into one run.
  EXPECT_EQ(ContiguousOffset(B2(11, 13, 100, 108), block), 8);
  // Not held at all.
  EXPECT_FALSE(LocateRuns(B2(9, 11, 100, 108), block, &runs));
}

TEST(LayoutTest, MoveRunsMergeOnlyWhereBothSidesAreContiguous) {
  // Source holds rows 0..3 full width 6; destination holds columns 2..4.
  const Segments src = {{B2(0, 4, 0, 6), 0}};
  const Segments dst = {{B2(0, 4, 2, 5), 100}};
  std::vector<passes::Run> runs;
  ASSERT_TRUE(MoveRuns(B2(1, 3, 2, 5), src, dst, &runs));
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0], (passes::Run{8, 103, 3}));
  EXPECT_EQ(runs[1], (passes::Run{14, 106, 3}));
  // Both sides full width: one run.
  ASSERT_TRUE(MoveRuns(B2(1, 3, 0, 6), src, {{B2(0, 4, 0, 6), 7}}, &runs));
  EXPECT_EQ(runs, (std::vector<passes::Run>{{6, 13, 12}}));
}

TEST(LayoutTest, FlatRangeSegmentsAreContiguousInRowMajorOrder) {
  // A flat range of a [4, 5] value from element 3 to 13: [0,3:5] [1:2,0:5]
  // [2,0:3], stored consecutively.
  const std::vector<Box> boxes = {B2(0, 1, 3, 5), B2(1, 2, 0, 5), B2(2, 3, 0, 3)};
  const Segments flat = Consecutive(boxes);
  EXPECT_EQ(TotalElements(flat), 10);
  EXPECT_EQ(ContiguousOffset(B2(1, 2, 0, 5), flat), 2);
  // Spanning two segments that are adjacent in the buffer, in row order.
  EXPECT_EQ(ContiguousOffset(B2(0, 1, 3, 5), flat), 0);
  std::vector<passes::Run> runs;
  ASSERT_TRUE(LocateRuns(B2(1, 3, 0, 3), flat, &runs));
  EXPECT_EQ(runs.size(), 2u);  // row 1 cols 0-2, then row 2 cols 0-2
}

TEST(LayoutTest, AlignedPiecesStartOnAlignmentBoundaries) {
  // F16 pieces of 3 x 3 elements (18 B): offsets 0, 24 B (12), 48 B (24).
  const Segments p = AlignedPieces(
      std::vector<Box>{B2(0, 3, 0, 3), B2(0, 3, 3, 6), B2(0, 3, 6, 9)}, 2, 8);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[1].offset, 12);
  EXPECT_EQ(p[2].offset, 24);
  EXPECT_EQ(Extent(p), 33);
  EXPECT_EQ(TotalElements(p), 27);
  // A column piece's sub-rows are contiguous, across pieces they are not.
  EXPECT_EQ(ContiguousOffset(B2(1, 3, 3, 6), p), 15);
  EXPECT_FALSE(ContiguousOffset(B2(0, 1, 2, 4), p).has_value());
}

TEST(LayoutTest, Rank3RowsAndIntersections) {
  Box a;
  a.rank = 3;
  a.begin = {0, 0, 0, 0};
  a.end = {2, 3, 4, 0};
  Box b = a;
  b.begin = {1, 1, 0, 0};
  b.end = {2, 3, 4, 0};
  EXPECT_EQ(IntersectBoxes(a, b), b);
  EXPECT_EQ(BoxRows(b), 2);
  EXPECT_EQ(BoxWidth(b), 4);
  EXPECT_EQ(ContiguousOffset(b, {{a, 0}}), 16);  // (1*3 + 1) * 4
  EXPECT_TRUE(ContainsBox(a, b));
  Box c = a;
  c.begin = {5, 0, 0, 0};
  c.end = {6, 1, 1, 0};
  EXPECT_TRUE(IntersectBoxes(a, c).Empty());
}

TEST(LayoutTest, CountRunsOfAStridedCopyIsOneRunPerRow) {
  // A 92-row local part of a 24-column block copied into a 269-column
  // staging panel: one run of 24 elements per row.
  const Segments src = {{B2(0, 92, 100, 124), 0}};
  const Segments dst = {{B2(0, 146, 0, 269), 0}};
  std::vector<RunGroup> groups;
  ASSERT_TRUE(CountRuns(B2(0, 92, 100, 124), src, dst, &groups));
  EXPECT_EQ(groups, (std::vector<RunGroup>{{92, 24}}));
  // Into a K piece of exactly its columns: one run.
  ASSERT_TRUE(CountRuns(B2(0, 92, 100, 124), src,
                        {{B2(0, 146, 100, 124), 0}}, &groups));
  EXPECT_EQ(groups, (std::vector<RunGroup>{{1, 92 * 24}}));
  // A source stored as two column pieces: one run per piece.
  const Segments pieces =
      AlignedPieces(std::vector<Box>{B2(0, 92, 100, 120), B2(0, 92, 120, 124)},
                    2, 8);
  ASSERT_TRUE(CountRuns(B2(0, 92, 100, 124), pieces,
                        AlignedPieces(std::vector<Box>{B2(0, 146, 100, 120),
                                                       B2(0, 146, 120, 124)},
                                      2, 8),
                        &groups));
  EXPECT_EQ(groups, (std::vector<RunGroup>{{1, 92 * 20}, {1, 92 * 4}}));
  // Missing elements.
  EXPECT_FALSE(CountRuns(B2(0, 93, 100, 124), src, dst, &groups));
}


TEST(LayoutTest, SameContiguousRangeNeedsBackToBackBoxesEverywhere) {
  // A flat range cut into row boxes, consecutive: one range.
  const std::vector<Box> rows = {B2(0, 1, 3, 8), B2(1, 3, 0, 8), B2(3, 4, 0, 2)};
  const Segments flat = Consecutive(rows);
  EXPECT_TRUE(SameContiguousRange(flat, {}));
  EXPECT_TRUE(SameContiguousRange(flat, std::vector<Segments>{flat}));
  // Column pieces that happen to lie back to back (10 + 1 F16 columns of 6
  // rows: 120 B, then 12 B at 120, already aligned) are one range too.
  const std::vector<Box> pieces = {B2(0, 6, 33, 43), B2(0, 6, 43, 44)};
  const Segments f16 = AlignedPieces(pieces, 2, 8);
  EXPECT_TRUE(SameContiguousRange(f16, std::vector<Segments>{f16}));
  // The same pieces in FP8 leave a gap (60 B, next at 64).
  const Segments fp8 = AlignedPieces(pieces, 1, 8);
  EXPECT_FALSE(SameContiguousRange(fp8, {}));
  EXPECT_FALSE(SameContiguousRange(f16, std::vector<Segments>{fp8}));
  // Other boxes in an operand.
  EXPECT_FALSE(SameContiguousRange(flat, std::vector<Segments>{Consecutive(
                                             std::vector<Box>{B2(0, 4, 0, 8)})}));
}

// Random arrangements: a region of a rank-1..3 value cut into boxes, laid
// out consecutively or as aligned pieces, in random order.
Segments RandomArrangement(std::mt19937& rng, const Box& region) {
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  std::vector<Box> boxes = {region};
  const int cuts = static_cast<int>(pick(0, 3));
  for (int c = 0; c < cuts; ++c) {
    const size_t i = static_cast<size_t>(pick(0, boxes.size() - 1));
    const Box b = boxes[i];
    const int axis = static_cast<int>(pick(0, b.rank - 1));
    if (b.end[axis] - b.begin[axis] < 2) continue;
    const int64_t at = pick(b.begin[axis] + 1, b.end[axis] - 1);
    Box lo = b, hi = b;
    lo.end[axis] = at;
    hi.begin[axis] = at;
    boxes[i] = lo;
    boxes.insert(boxes.begin() + i + 1, hi);
  }
  if (pick(0, 2) == 0) std::shuffle(boxes.begin(), boxes.end(), rng);
  return pick(0, 1) ? Consecutive(boxes)
                    : AlignedPieces(boxes, static_cast<int>(pick(1, 4)), 8);
}

TEST(LayoutPropertyTest, CountRunsAgreesWithMoveRuns) {
  std::mt19937 rng(77);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int merged = 0;
  for (int i = 0; i < 3000; ++i) {
    Box value;
    value.rank = static_cast<int>(pick(1, 3));
    for (int a = 0; a < value.rank; ++a) value.end[a] = pick(1, 7);
    auto sub_box = [&](const Box& outer) {
      Box b = outer;
      for (int a = 0; a < outer.rank; ++a) {
        b.begin[a] = pick(outer.begin[a], outer.end[a] - 1);
        b.end[a] = pick(b.begin[a] + 1, outer.end[a]);
      }
      return b;
    };
    // Sometimes whole-value arrangements, so that runs merge across rows.
    const Box src_region = pick(0, 1) ? value : sub_box(value);
    const Box dst_region = pick(0, 1) ? value : sub_box(value);
    const Segments src = RandomArrangement(rng, src_region);
    const Segments dst = RandomArrangement(rng, dst_region);
    const Box box = pick(0, 3) == 0 ? sub_box(value)
                                    : IntersectBoxes(src_region, dst_region);
    if (box.Empty()) continue;
    std::vector<passes::Run> runs;
    const bool moved = MoveRuns(box, src, dst, &runs);
    std::vector<RunGroup> groups;
    ASSERT_EQ(CountRuns(box, src, dst, &groups), moved)
        << SegmentsText(src) << " -> " << SegmentsText(dst) << " box "
        << FormatBox(box);
    std::vector<int64_t> expected, counted;
    for (const passes::Run& r : runs) expected.push_back(r.count);
    for (const RunGroup& g : groups) {
      EXPECT_GT(g.count, 0);
      for (int64_t k = 0; k < g.count; ++k) counted.push_back(g.elements);
    }
    ASSERT_EQ(counted, expected)
        << SegmentsText(src) << " -> " << SegmentsText(dst) << " box "
        << FormatBox(box);
    merged += runs.size() < static_cast<size_t>(BoxRows(box));
    // ContiguousOffset's fast paths agree with locating the runs.
    std::vector<passes::Run> located;
    const std::optional<int64_t> expected_offset =
        LocateRuns(box, src, &located) && located.size() == 1
            ? std::optional<int64_t>(located[0].src)
            : std::nullopt;
    EXPECT_EQ(ContiguousOffset(box, src), expected_offset)
        << SegmentsText(src) << " box " << FormatBox(box);
  }
  EXPECT_GT(merged, 100);
}

// What emit-device would schedule for `plan` (each tile storing its
// blocks as the ownerships hold them).
kernels::PhaseTraffic Traffic(const TransferPlan& plan,
                              const fb::OwnershipT& source,
                              const fb::OwnershipT& destination,
                              std::span<const int64_t> shape,
                              const fb::TargetT& target, bool unicast) {
  OwnershipStorage from(source, shape), to(destination, shape);
  return TrafficOfTransfers(
      plan.transfers, 1, target,
      [&](int tile, bool is_source) -> const Segments& {
        return is_source ? from.Of(tile) : to.Of(tile);
      },
      unicast);
}

int64_t ScheduledLength(const kernels::PhaseTraffic& traffic) {
  return kernels::FiguresOfStarts(traffic,
                                  kernels::SchedulePhaseStarts(traffic))
      .length;
}

fb::TargetT Ipu21() {
  fb::TargetT target;
  EXPECT_TRUE(ir::LoadTarget("ipu21", &target).ok());
  return target;
}

// A weight's delivery home for a layout of R = 4 replicas is an all-gather:
// the tile of each slab needs the other three. As multicasts the four take
// turns to send (four slabs' time); as unicasts each sends while it
// receives (three). A Redistribute op takes the unicasts, priced by their
// schedule; an operand's delivery stays multicast.
TEST(RedistributionCostTest, AnAllGatherGoesAsUnicasts) {
  const fb::TargetT target = Ipu21();
  const std::vector<int64_t> shape = {256, 512};  // FP8
  const fb::OwnershipT layout = BlockedOwnership({2, 8}, 4);
  const fb::OwnershipT home = *DeliveryHome(layout, 4);
  const TransferPlan plan = PlanTransfers(home, layout, shape, 1);
  ASSERT_TRUE(SendersReceiveMulticasts(plan));
  const kernels::PhaseTraffic multicast =
      Traffic(plan, home, layout, shape, target, false);
  const kernels::PhaseTraffic unicast =
      Traffic(plan, home, layout, shape, target, true);
  EXPECT_EQ(unicast.EndpointBound(), multicast.EndpointBound());
  const int64_t slab = 128 * 64 / 4 / 4;  // a slab's words: cycles on a lane
  EXPECT_GE(ScheduledLength(multicast), 4 * slab);
  EXPECT_LT(ScheduledLength(unicast), 4 * slab);

  const TransferCost cost = RedistributeOpCost(home, layout, shape, 1, target);
  EXPECT_TRUE(cost.unicast);
  EXPECT_EQ(cost.scheduled_cycles, ScheduledLength(unicast));
  EXPECT_EQ(cost.phase_cycles, cost.scheduled_cycles + target.sync_cycles);
  // Each slab goes to three tiles, one transfer each.
  EXPECT_EQ(cost.transfers, 3 * static_cast<int64_t>(plan.transfers.size()));
  EXPECT_EQ(cost.bytes_sent, 3 * CostOfPlan(plan, target).bytes_sent);
  EXPECT_EQ(cost.bytes_received, CostOfPlan(plan, target).bytes_received);
  const TransferCost delivery =
      RedistributionCost(home, layout, shape, 1, target);
  EXPECT_FALSE(delivery.unicast);
  EXPECT_EQ(delivery.scheduled_cycles, ScheduledLength(multicast));
}

// A LayerNorm's vector from its home of 81 slabs to all 1,458 tiles of its
// layout: as unicasts each slab's tile would send its slab 1,457 times,
// longer than the multicasts' whole schedule, so they stay multicasts.
TEST(RedistributionCostTest, ABroadcastStaysMulticast) {
  const fb::TargetT target = Ipu21();
  const std::vector<int64_t> shape = {1152};
  const fb::OwnershipT layout = BlockedOwnership({1}, 1458);
  const fb::OwnershipT home = *DeliveryHome(layout, 81);
  const TransferPlan plan = PlanTransfers(home, layout, shape, 2);
  ASSERT_TRUE(SendersReceiveMulticasts(plan));
  const TransferCost cost = RedistributeOpCost(home, layout, shape, 2, target);
  EXPECT_FALSE(cost.unicast);
  EXPECT_EQ(cost.transfers, static_cast<int64_t>(plan.transfers.size()));
  EXPECT_GT(CostOfPlan(plan, target, true).bound_cycles, cost.phase_cycles);
}

// Where no sender receives (a block replicated onto tiles apart from its
// source), a multicast's receivers wait only for one another.
TEST(RedistributionCostTest, SendersThatDoNotReceiveKeepMulticasts) {
  const fb::TargetT target = Ipu21();
  const std::vector<int64_t> shape = {64, 64};
  const fb::OwnershipT source = BlockedOwnership({4, 1});
  const fb::OwnershipT replicated = BlockedOwnership({4, 1}, 3, 4);
  const TransferPlan plan = PlanTransfers(source, replicated, shape, 2);
  EXPECT_FALSE(SendersReceiveMulticasts(plan));
  EXPECT_FALSE(
      RedistributeOpCost(source, replicated, shape, 2, target).unicast);
}

}  // namespace
}  // namespace tilec::passes
