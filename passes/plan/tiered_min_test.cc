#include "passes/plan/tiered_min.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

namespace tilec::plan {
namespace {

// Options with costs at three tiers (floor <= bound <= exact), and what
// each tier priced.
struct Options {
  std::vector<std::vector<int64_t>> tiers;  // [tier][option]
  std::vector<std::set<size_t>> priced;     // [tier]

  TierPrice Price() {
    priced.assign(tiers.size(), {});
    return [this](std::span<const size_t> which,
                  int tier) -> StatusOr<std::vector<int64_t>> {
      std::vector<int64_t> out;
      for (size_t i : which) {
        EXPECT_TRUE(priced[tier].insert(i).second)
            << "option " << i << " priced twice at tier " << tier;
        out.push_back(tiers[tier][i]);
      }
      return out;
    };
  }
};

Options Random(std::mt19937_64& rng, size_t n) {
  std::uniform_int_distribution<int64_t> cost(100, 140), gap(0, 30);
  Options o;
  o.tiers.assign(3, std::vector<int64_t>(n));
  for (size_t i = 0; i < n; ++i) {
    o.tiers[2][i] = cost(rng);
    o.tiers[1][i] = o.tiers[2][i] - gap(rng) / 3;
    o.tiers[0][i] = o.tiers[1][i] - gap(rng);
  }
  return o;
}

TEST(CheapestByTiersTest, TheFirstOfTheCheapestExactly) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t n = 1 + trial % 40;
    Options o = Random(rng, n);
    const std::vector<int64_t>& exact = o.tiers[2];
    const size_t want = static_cast<size_t>(
        std::min_element(exact.begin(), exact.end()) - exact.begin());
    for (size_t batch : {1, 2, 3}) {
      StatusOr<std::pair<int64_t, size_t>> got =
          CheapestByTiers(n, 2, batch, o.Price());
      ASSERT_TRUE(got.ok());
      EXPECT_EQ(got->second, want) << "trial " << trial;
      EXPECT_EQ(got->first, exact[want]);
      EXPECT_EQ(o.priced[0].size(), n);  // every floor
      // Nothing beyond a tier is priced unless the tier below it was.
      for (size_t i : o.priced[2]) EXPECT_TRUE(o.priced[1].count(i));
    }
  }
}

// Options whose floors are above the best exact cost are never bounded,
// and those whose bounds are above it never priced exactly.
TEST(CheapestByTiersTest, BoundsOnlyWhatItsFloorDoesNotRuleOut) {
  Options o;
  o.tiers = {{10, 50, 12, 60}, {11, 55, 20, 61}, {15, 56, 21, 62}};
  StatusOr<std::pair<int64_t, size_t>> got =
      CheapestByTiers(4, 2, 1, o.Price());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, std::pair(int64_t{15}, size_t{0}));
  EXPECT_EQ(o.priced[1], (std::set<size_t>{0, 2}));
  EXPECT_EQ(o.priced[2], (std::set<size_t>{0}));
}

// Ties go to the first option, whichever bounds come first.
TEST(CheapestByTiersTest, TiesGoToTheFirst) {
  Options o;
  o.tiers = {{5, 1, 3}, {9, 2, 9}, {9, 9, 9}};
  StatusOr<std::pair<int64_t, size_t>> got =
      CheapestByTiers(3, 2, 2, o.Price());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, std::pair(int64_t{9}, size_t{0}));
}

// The best `top` in the caller's order (ties here by descending index),
// exactly priced, against sorting every option's exact cost.
TEST(RankByTiersTest, TheBestTopExactlyInTheCallersOrder) {
  std::mt19937_64 rng(11);
  const CostOrder before = [](const std::pair<int64_t, size_t>& a,
                              const std::pair<int64_t, size_t>& b) {
    return a.first != b.first ? a.first < b.first : a.second > b.second;
  };
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n = trial % 30;
    const size_t top = 1 + trial % 7;
    Options o = Random(rng, n);
    std::vector<std::pair<int64_t, size_t>> want;
    for (size_t i = 0; i < n; ++i) want.push_back({o.tiers[2][i], i});
    std::sort(want.begin(), want.end(), before);
    want.resize(std::min(n, top));
    StatusOr<std::vector<std::pair<int64_t, size_t>>> got =
        RankByTiers(n, top, 2, 1, before, o.Price());
    ASSERT_TRUE(got.ok());
    ASSERT_GE(got->size(), want.size());
    for (size_t r = 0; r < want.size(); ++r) {
      EXPECT_EQ((*got)[r], want[r]) << "trial " << trial << " rank " << r;
    }
    for (const auto& [cost, i] : *got) EXPECT_EQ(cost, o.tiers[2][i]);
  }
}

TEST(CheapestByTiersTest, AnErrorIsReturned) {
  StatusOr<std::pair<int64_t, size_t>> got = CheapestByTiers(
      3, 2, 1,
      [](std::span<const size_t>, int tier) -> StatusOr<std::vector<int64_t>> {
        if (tier == 1) return Status::Internal("no bound");
        return std::vector<int64_t>{1, 2, 3};
      });
  EXPECT_FALSE(got.ok());
  EXPECT_EQ(got.status().message(), "no bound");
}

}  // namespace
}  // namespace tilec::plan
