// The integer helpers of basics.h at their edges.

#include "formats/basics.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace tilec::ir {
namespace {

TEST(CeilDiv, RoundsUpForPositiveAndTowardZeroForNegative) {
  EXPECT_EQ(CeilDiv(0, 4), 0);
  EXPECT_EQ(CeilDiv(1, 4), 1);
  EXPECT_EQ(CeilDiv(4, 4), 1);
  EXPECT_EQ(CeilDiv(5, 4), 2);
  EXPECT_EQ(CeilDiv(-5, 4), -1);
  EXPECT_EQ(CeilDiv(-4, 4), -1);
  // No overflow where a + b - 1 would.
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(CeilDiv(kMax, 2), kMax / 2 + 1);
}

TEST(RoundUp, PadsToTheNextMultiple) {
  EXPECT_EQ(RoundUp(0, 8), 0);
  EXPECT_EQ(RoundUp(1, 8), 8);
  EXPECT_EQ(RoundUp(8, 8), 8);
  EXPECT_EQ(RoundUp(9, 8), 16);
  EXPECT_EQ(RoundUp(13, 1), 13);
  EXPECT_EQ(RoundUp(-5, 4), -4);
}

}  // namespace
}  // namespace tilec::ir
