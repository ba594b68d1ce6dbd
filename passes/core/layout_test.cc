#include "passes/core/layout.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tilec::passes
