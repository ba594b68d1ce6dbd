#include "formats/ir.h"
#include "passes/core/ownership.h"

#include <glog/logging.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "formats/print.h"

namespace tilec::passes {
namespace {

using Shape = std::vector<int64_t>;

Box MakeBox(std::vector<std::pair<int64_t, int64_t>> ranges) {
  Box box;
  box.rank = static_cast<int>(ranges.size());
  for (size_t a = 0; a < ranges.size(); ++a) {
    box.begin[a] = ranges[a].first;
    box.end[a] = ranges[a].second;
  }
  return box;
}

std::vector<std::string> Format(const std::vector<Box>& boxes) {
  std::vector<std::string> out;
  for (const Box& box : boxes) out.push_back(FormatBox(box));
  return out;
}

fb::TargetT Ipu21Exchange() {
  fb::TargetT target;
  CHECK(ir::LoadTarget("ipu21", &target).ok());
  return target;
}

// ------------------------------------------------------------ brute force
// The contract applied element by element, written independently of the
// library's closed forms: holds[tile][flat element].

constexpr int kTiles = 64;

std::vector<int64_t> BalancedOwners(int64_t extent, int64_t parts) {
  std::vector<int64_t> owner;
  for (int64_t k = 0; k < parts; ++k) {
    const int64_t size = extent / parts + (k < extent % parts ? 1 : 0);
    for (int64_t i = 0; i < size; ++i) owner.push_back(k);
  }
  return owner;
}

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  return n;
}

std::vector<int64_t> Coordinates(const Shape& shape, int64_t flat) {
  std::vector<int64_t> c(shape.size());
  for (int a = static_cast<int>(shape.size()) - 1; a >= 0; --a) {
    c[a] = flat % shape[a];
    flat /= shape[a];
  }
  return c;
}

using Holds = std::vector<std::vector<char>>;

Holds BruteHolds(const fb::OwnershipT& o, const Shape& shape) {
  const int64_t n = NumElements(shape);
  Holds holds(kTiles, std::vector<char>(n, 0));
  if (o.kind == fb::OwnershipKind::Blocked) {
    // Per axis and element: its block, and with sub-partitions its part
    // within the block (a balanced split of the block's own extent).
    const int rank = static_cast<int>(shape.size());
    const bool nested = !o.sub_partitions.empty();
    std::vector<std::vector<int64_t>> owners, subs;
    for (int a = 0; a < rank; ++a) {
      owners.push_back(BalancedOwners(shape[a], o.partitions[a]));
      std::vector<int64_t> sub(shape[a], 0);
      if (nested) {
        int64_t begin = 0;
        for (int64_t block = 0; block < o.partitions[a]; ++block) {
          int64_t size = 0;
          while (begin + size < shape[a] && owners[a][begin + size] == block) {
            ++size;
          }
          const std::vector<int64_t> parts =
              BalancedOwners(size, o.sub_partitions[a]);
          for (int64_t i = 0; i < size; ++i) sub[begin + i] = parts[i];
          begin += size;
        }
      }
      subs.push_back(sub);
    }
    // Grid axes: the blocks, the parts within them (nested only), then the
    // replicas; linearized in the axis order, slowest first.
    std::vector<int64_t> counts(o.partitions.begin(), o.partitions.end());
    if (nested) {
      counts.insert(counts.end(), o.sub_partitions.begin(),
                    o.sub_partitions.end());
    }
    counts.push_back(o.replicas);
    const int replica_axis = static_cast<int>(counts.size()) - 1;
    std::vector<int32_t> order = o.axis_order;
    if (order.empty()) {
      for (int a = 0; a <= replica_axis; ++a) order.push_back(a);
    }
    for (int64_t e = 0; e < n; ++e) {
      const std::vector<int64_t> c = Coordinates(shape, e);
      std::vector<int64_t> cell(counts.size());
      for (int a = 0; a < rank; ++a) {
        cell[a] = owners[a][c[a]];
        if (nested) cell[rank + a] = subs[a][c[a]];
      }
      for (int k = 0; k < o.replicas; ++k) {
        cell[replica_axis] = k;
        int64_t position = 0;
        for (int32_t axis : order)
          position = position * counts[axis] + cell[axis];
        holds[o.first_tile + position * o.tile_stride][e] = 1;
      }
    }
  } else {
    const int64_t grains = (n + o.grain - 1) / o.grain;
    const std::vector<int64_t> block = BalancedOwners(grains, o.tiles);
    for (int64_t e = 0; e < n; ++e) {
      holds[o.first_tile + block[e / o.grain] * o.tile_stride][e] = 1;
    }
  }
  return holds;
}

// Flat indices of a box's elements.
std::vector<int64_t> BoxElements(const Box& box, const Shape& shape) {
  std::vector<int64_t> out;
  const int64_t n = NumElements(shape);
  for (int64_t e = 0; e < n; ++e) {
    const std::vector<int64_t> c = Coordinates(shape, e);
    bool inside = true;
    for (size_t a = 0; a < shape.size(); ++a) {
      inside = inside && c[a] >= box.begin[a] && c[a] < box.end[a];
    }
    if (inside) out.push_back(e);
  }
  return out;
}

TransferCost ReferenceCost(const TransferPlan& plan,
                           const fb::TargetT& target) {
  std::map<int, int64_t> sent, received, fragments, copy_cycles;
  TransferCost cost;
  for (const Transfer& t : plan.transfers) {
    sent[t.source_tile] += t.bytes;
    ++fragments[t.source_tile];
    for (int d : t.destination_tiles) {
      received[d] += t.bytes;
      ++fragments[d];
    }
  }
  // ipu21's copy kernel (docs/machine.md): 288 + ceil(B / 8) per call.
  for (const LocalCopy& c : plan.local_copies) {
    copy_cycles[c.tile] += 288 + (c.bytes + 7) / 8;
  }
  int64_t slowest = 0;
  for (const auto& [tile, frags] : fragments) {
    const int64_t rate = target.exchange_bytes_per_cycle;
    slowest = std::max({slowest, (sent[tile] + rate - 1) / rate,
                        (received[tile] + rate - 1) / rate,
                        frags * target.exchange_fragment_cycles});
  }
  cost.bound_cycles = plan.transfers.empty() ? 0 : slowest;
  for (const auto& [tile, cycles] : copy_cycles) {
    cost.local_copy_cycles = std::max(cost.local_copy_cycles, cycles);
  }
  return cost;
}

// ------------------------------------------------------------ random input

Shape RandomShape(std::mt19937& rng) {
  const int rank = std::uniform_int_distribution<int>(1, 3)(rng);
  const int64_t max_extent = rank == 1 ? 40 : rank == 2 ? 12 : 7;
  Shape shape(rank);
  for (int64_t& e : shape) {
    e = std::uniform_int_distribution<int64_t>(1, max_extent)(rng);
  }
  return shape;
}

fb::OwnershipT RandomOwnership(std::mt19937& rng, const Shape& shape) {
  auto pick = [&](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  for (int attempt = 0;; ++attempt) {
    fb::OwnershipT o;
    const int stride = pick(0, 3) == 0 ? pick(2, 3) : 1;
    const int first = pick(0, 2) == 0 ? pick(1, 9) : 0;
    if (pick(0, 2) == 0) {
      // Grains of 1..7 over up to 24 tiles (sometimes more tiles than
      // grains, so that some tiles hold nothing).
      o = FlatOwnership(pick(1, 7), pick(1, 24), first, stride);
    } else {
      std::vector<int32_t> parts;
      // One part more than the extent now and then: an empty block.
      for (int64_t e : shape) parts.push_back(pick(1, std::min<int>(e + 1, 5)));
      o = BlockedOwnership(parts, pick(0, 1) ? pick(1, 4) : 1, first, stride);
      if (pick(0, 2) == 0) {
        // Blocks split again (sometimes into more parts than they have).
        for (int64_t e : shape) {
          o.sub_partitions.push_back(pick(1, std::min<int>(e + 1, 4)));
        }
      }
      if (pick(0, 1) == 0) {
        // A random order of the grid axes (sometimes the identity).
        const int grid_axes = o.sub_partitions.empty()
                                  ? static_cast<int>(shape.size()) + 1
                                  : 2 * static_cast<int>(shape.size()) + 1;
        for (int a = 0; a < grid_axes; ++a) o.axis_order.push_back(a);
        std::shuffle(o.axis_order.begin(), o.axis_order.end(), rng);
      }
    }
    if (attempt > 50)
      o = BlockedOwnership(std::vector<int32_t>(shape.size(), 1));
    if (ValidateOwnership(o, shape, kTiles).empty()) return o;
  }
}

// ------------------------------------------------------------ hand examples

TEST(OwnershipTest, UnevenRowsSplitIntoBalancedBlocks) {
  const Shape shape = {729};
  const fb::OwnershipT o = BlockedOwnership({6});
  std::vector<std::string> boxes;
  for (int tile = 0; tile < 6; ++tile) {
    const std::vector<Box> held = HeldBoxes(o, shape, tile);
    ASSERT_EQ(held.size(), 1u);
    boxes.push_back(FormatBox(held[0]));
  }
  EXPECT_EQ(boxes,
            (std::vector<std::string>{"[0:122]", "[122:244]", "[244:366]",
                                      "[366:487]", "[487:608]", "[608:729]"}));
  EXPECT_TRUE(HeldBoxes(o, shape, 6).empty());
  EXPECT_EQ(HeldElements(o, shape, 3), 121);
  EXPECT_EQ(MaxBytesPerTile(o, shape, 2), 244);
}

TEST(OwnershipTest, BlockedGridPutsReplicasFastest) {
  const Shape shape = {729, 4304};
  const fb::OwnershipT o = BlockedOwnership({9, 6}, 27);
  EXPECT_EQ(Format(HeldBoxes(o, shape, 0)),
            std::vector<std::string>{"[0:81, 0:718]"});
  EXPECT_EQ(Format(HeldBoxes(o, shape, 26)),
            std::vector<std::string>{"[0:81, 0:718]"});
  EXPECT_EQ(Format(HeldBoxes(o, shape, 27)),
            std::vector<std::string>{"[0:81, 718:1436]"});
  EXPECT_EQ(Format(HeldBoxes(o, shape, 6 * 27)),
            std::vector<std::string>{"[81:162, 0:718]"});
  // 4304 = 6 * 717 + 2: the first two column blocks have 718.
  EXPECT_EQ(Format(HeldBoxes(o, shape, 1457)),
            std::vector<std::string>{"[648:729, 3587:4304]"});
  EXPECT_TRUE(HeldBoxes(o, shape, 1458).empty());
  EXPECT_EQ(TilesUsed(o, shape).size(), 1458u);
  EXPECT_EQ(MaxBytesPerTile(o, shape, 2), 81 * 718 * 2);
}

fb::OwnershipT Ordered(fb::OwnershipT o, std::vector<int32_t> order) {
  o.axis_order = std::move(order);
  return o;
}

fb::OwnershipT Nested(fb::OwnershipT o, std::vector<int32_t> sub) {
  o.sub_partitions = std::move(sub);
  return o;
}

TEST(OwnershipTest, AxisOrderPlacesTheGemmOperandsOfDocsPlanning) {
  // docs/planning.md: up GEMM 9 x 6 x 27 (m x k x n); grid position
  // (mi, ni, ki) runs on tile (mi*27 + ni)*6 + ki.
  const Shape a_shape = {729, 1152};
  const fb::OwnershipT a = Ordered(BlockedOwnership({9, 6}, 27), {0, 2, 1});
  const Shape b_shape = {1152, 4304};
  const fb::OwnershipT b = Ordered(BlockedOwnership({6, 27}, 9), {2, 1, 0});
  ASSERT_EQ(ValidateOwnership(a, a_shape, 1472), "");
  ASSERT_EQ(ValidateOwnership(b, b_shape, 1472), "");
  for (int mi : {0, 4, 8}) {
    for (int ni : {0, 13, 26}) {
      for (int ki : {0, 5}) {
        const int tile = (mi * 27 + ni) * 6 + ki;
        SCOPED_TRACE("tile " + std::to_string(tile));
        const std::vector<Box> held_a = HeldBoxes(a, a_shape, tile);
        ASSERT_EQ(held_a.size(), 1u);
        EXPECT_EQ(held_a[0].begin[0], mi * 81);
        EXPECT_EQ(held_a[0].begin[1], ki * 192);
        const std::vector<Box> held_b = HeldBoxes(b, b_shape, tile);
        ASSERT_EQ(held_b.size(), 1u);
        EXPECT_EQ(held_b[0].begin[0], ki * 192);
        // 4304 = 27 * 159 + 11: the first 11 column blocks have 160.
        EXPECT_EQ(held_b[0].begin[1], ni * 159 + std::min(ni, 11));
      }
    }
  }
  EXPECT_EQ(TilesUsed(a, a_shape).size(), 1458u);
  EXPECT_EQ(TilesUsed(a, a_shape).back(), 1457);
  // The K-split partners of one output block are adjacent tiles 0..5, and
  // the replicas of A block (0, 0) are every sixth tile.
  EXPECT_EQ(Format(HeldBoxes(a, a_shape, 6)),
            std::vector<std::string>{"[0:81, 0:192]"});
  EXPECT_EQ(BytesPerTile(a, a_shape, 2, 1472)[1457], 81 * 192 * 2);
  EXPECT_EQ(BytesPerTile(a, a_shape, 2, 1472)[1458], 0);
}

TEST(OwnershipTest, AxisOrderChangesPlacementButNotContents) {
  const Shape shape = {4, 6};
  const fb::OwnershipT natural = BlockedOwnership({2, 3});
  const fb::OwnershipT columns_slowest = Ordered(natural, {1, 0, 2});
  // Natural: tile = row part * 3 + column part. Columns slowest: tile =
  // column part * 2 + row part.
  EXPECT_EQ(Format(HeldBoxes(natural, shape, 1)),
            std::vector<std::string>{"[0:2, 2:4]"});
  EXPECT_EQ(Format(HeldBoxes(columns_slowest, shape, 1)),
            std::vector<std::string>{"[2:4, 0:2]"});
  EXPECT_TRUE(SameOwnership(Ordered(natural, {0, 1, 2}), natural));
  EXPECT_FALSE(SameOwnership(columns_slowest, natural));
  EXPECT_FALSE(SamePlacement(columns_slowest, natural, shape));
  // Every element moves except those of the blocks whose tile is unchanged
  // (grid cells 0 and 5).
  const TransferPlan plan = PlanTransfers(natural, columns_slowest, shape, 2);
  EXPECT_EQ(plan.local_copies.size(), 2u);
  EXPECT_EQ(plan.transfers.size(), 4u);
}

TEST(OwnershipTest, SubPartitionsSplitEachBlockAgain) {
  // Rows: blocks [0,4) and [4,7), each split in two: [0,2) [2,4) [4,6)
  // [6,7). Grid order rows' blocks, rows' parts, columns: what a K-split
  // GEMM's result looks like (m = 2, k = 2, n = 2).
  const fb::OwnershipT o =
      Ordered(Nested(BlockedOwnership({2, 2}), {2, 1}), {0, 2, 1, 3, 4});
  EXPECT_EQ(FormatOwnership(o), "blocked(2x2, sub=2x1, order=0,2,1,3,4)");
  const Shape shape = {7, 4};
  EXPECT_EQ(HeldBoxes(o, shape, 0), std::vector<Box>{MakeBox({{0, 2}, {0, 2}})});
  EXPECT_EQ(HeldBoxes(o, shape, 1), std::vector<Box>{MakeBox({{0, 2}, {2, 4}})});
  EXPECT_EQ(HeldBoxes(o, shape, 2), std::vector<Box>{MakeBox({{2, 4}, {0, 2}})});
  EXPECT_EQ(HeldBoxes(o, shape, 5), std::vector<Box>{MakeBox({{4, 6}, {2, 4}})});
  EXPECT_EQ(HeldBoxes(o, shape, 7), std::vector<Box>{MakeBox({{6, 7}, {2, 4}})});
  EXPECT_EQ(MaxBytesPerTile(o, shape, 1), 4);
  std::string error;
  std::optional<fb::OwnershipT> parsed =
      ParseOwnership("blocked(2x2, sub=2x1, order=0,2,1,3,4)", &error);
  ASSERT_TRUE(parsed) << error;
  EXPECT_TRUE(SameOwnership(*parsed, o));
  // A block smaller than its sub count leaves empty parts behind its rows.
  const fb::OwnershipT thin = Nested(BlockedOwnership({2, 1}), {3, 1});
  EXPECT_EQ(HeldBoxes(thin, Shape{4, 1}, 2), std::vector<Box>{});
  EXPECT_EQ(HeldBoxes(thin, Shape{4, 1}, 3), std::vector<Box>{MakeBox({{2, 3}, {0, 1}})});
}

TEST(OwnershipTest, StrideAndFirstTileMoveTheGrid) {
  const Shape shape = {8};
  const fb::OwnershipT o = BlockedOwnership({2}, 2, 3, 2);
  EXPECT_EQ(TilesUsed(o, shape), (std::vector<int>{3, 5, 7, 9}));
  EXPECT_EQ(Format(HeldBoxes(o, shape, 7)), std::vector<std::string>{"[4:8]"});
  EXPECT_TRUE(HeldBoxes(o, shape, 4).empty());
}

TEST(OwnershipTest, MorePartsThanElementsLeavesEmptyBlocks) {
  const Shape shape = {3};
  const fb::OwnershipT o = BlockedOwnership({5});
  EXPECT_EQ(ValidateOwnership(o, shape, 16), "");
  EXPECT_EQ(TilesUsed(o, shape), (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(HeldBoxes(o, shape, 3).empty());
  EXPECT_EQ(HeldElements(o, shape, 4), 0);
}

TEST(OwnershipTest, FlatGrainsOverUnevenTileCounts) {
  // 10 elements in grains of 3: [0,3) [3,6) [6,9) [9,10); 4 grains over 3
  // tiles: 2, 1, 1.
  const Shape shape = {10};
  const fb::OwnershipT o = FlatOwnership(3, 3);
  EXPECT_EQ(Format(HeldBoxes(o, shape, 0)), std::vector<std::string>{"[0:6]"});
  EXPECT_EQ(Format(HeldBoxes(o, shape, 1)), std::vector<std::string>{"[6:9]"});
  EXPECT_EQ(Format(HeldBoxes(o, shape, 2)), std::vector<std::string>{"[9:10]"});
  EXPECT_EQ(MaxBytesPerTile(o, shape, 4), 24);
  // More tiles than grains: the last two hold nothing.
  const fb::OwnershipT wide = FlatOwnership(3, 6, 10);
  EXPECT_EQ(TilesUsed(wide, shape), (std::vector<int>{10, 11, 12, 13}));
  EXPECT_EQ(HeldElements(wide, shape, 13), 1);
  EXPECT_EQ(HeldElements(wide, shape, 14), 0);
}

TEST(OwnershipTest, FlatRangesAreCutIntoRowMajorBoxes) {
  // 20 elements over 3 tiles: [0,7) [7,14) [14,20).
  const Shape shape = {4, 5};
  const fb::OwnershipT o = FlatOwnership(1, 3);
  EXPECT_EQ(Format(HeldBoxes(o, shape, 0)),
            (std::vector<std::string>{"[0:1, 0:5]", "[1:2, 0:2]"}));
  EXPECT_EQ(Format(HeldBoxes(o, shape, 1)),
            (std::vector<std::string>{"[1:2, 2:5]", "[2:3, 0:4]"}));
  EXPECT_EQ(Format(HeldBoxes(o, shape, 2)),
            (std::vector<std::string>{"[2:3, 4:5]", "[3:4, 0:5]"}));
  // Rank 3, grains of 7 over 3 tiles: [0,14) [14,21) [21,24).
  const Shape cube = {2, 3, 4};
  const fb::OwnershipT g = FlatOwnership(7, 3);
  EXPECT_EQ(Format(HeldBoxes(g, cube, 0)),
            (std::vector<std::string>{"[0:1, 0:3, 0:4]", "[1:2, 0:1, 0:2]"}));
  EXPECT_EQ(Format(HeldBoxes(g, cube, 1)),
            (std::vector<std::string>{"[1:2, 0:1, 2:4]", "[1:2, 1:2, 0:4]",
                                      "[1:2, 2:3, 0:1]"}));
  EXPECT_EQ(Format(HeldBoxes(g, cube, 2)),
            (std::vector<std::string>{"[1:2, 2:3, 1:4]"}));
}

TEST(OwnershipTest, IntersectionOfSmallOwnerships) {
  // Rows in 2 blocks on tiles 0,1 against the same rows in 3 blocks on
  // tiles 4,5,6: [0,3) [3,6) vs [0,2) [2,4) [4,6).
  const Shape shape = {6, 2};
  const std::vector<Overlap> overlaps = Intersect(
      BlockedOwnership({2, 1}), BlockedOwnership({3, 1}, 1, 4), shape);
  const std::vector<Overlap> expected = {
      {0, 4, MakeBox({{0, 2}, {0, 2}})},
      {0, 5, MakeBox({{2, 3}, {0, 2}})},
      {1, 5, MakeBox({{3, 4}, {0, 2}})},
      {1, 6, MakeBox({{4, 6}, {0, 2}})},
  };
  EXPECT_EQ(overlaps, expected);
}

TEST(OwnershipTest, ReplicatedSourceMulticastsOnceToEveryReplica) {
  // [8] in 2 blocks x 2 replicas (tiles 0..3) to 2 full replicas on 4,5.
  const Shape shape = {8};
  const TransferPlan plan = PlanTransfers(
      BlockedOwnership({2}, 2), BlockedOwnership({1}, 2, 4), shape, 2);
  ASSERT_EQ(plan.transfers.size(), 2u);
  EXPECT_TRUE(plan.local_copies.empty());
  EXPECT_EQ(plan.transfers[0].source_tile, 0);
  EXPECT_EQ(plan.transfers[0].box, MakeBox({{0, 4}}));
  EXPECT_EQ(plan.transfers[0].destination_tiles, (std::vector<int>{4, 5}));
  EXPECT_EQ(plan.transfers[0].elements, 4);
  EXPECT_EQ(plan.transfers[0].bytes, 8);
  EXPECT_EQ(plan.transfers[1].source_tile, 2);
  EXPECT_EQ(plan.transfers[1].box, MakeBox({{4, 8}}));
  const TransferCost cost = CostOfPlan(plan, Ipu21Exchange());
  // Receivers: 16 B / 4 = 4 cycles, 2 fragments * 2 = 4 cycles. Without
  // addresses the plan has only its bound; TimeExchange (layout.h) times it.
  EXPECT_EQ(cost.bound_cycles, 4);
  EXPECT_EQ(cost.phase_cycles, 0);
  EXPECT_EQ(cost.bytes_sent, 16);
  EXPECT_EQ(cost.bytes_received, 32);
  EXPECT_EQ(cost.max_bytes_sent, 8);
  EXPECT_EQ(cost.max_bytes_received, 16);
  EXPECT_EQ(cost.max_fragments, 2);
  EXPECT_EQ(cost.transfers, 2);
  EXPECT_EQ(cost.exchange_bottleneck_tile, 4);
  EXPECT_EQ(cost.local_copy_cycles, 0);
}

TEST(OwnershipTest, SendingIsSpreadOverSourceReplicas) {
  // [12] fully replicated on tiles 0..2, to 3 flat blocks on tiles 3..5:
  // each replica sends one block.
  const Shape shape = {12};
  const TransferPlan plan =
      PlanTransfers(BlockedOwnership({1}, 3), FlatOwnership(1, 3, 3), shape, 1);
  ASSERT_EQ(plan.transfers.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(plan.transfers[i].source_tile, i);
    EXPECT_EQ(plan.transfers[i].box, MakeBox({{4 * i, 4 * i + 4}}));
    EXPECT_EQ(plan.transfers[i].destination_tiles, std::vector<int>{3 + i});
  }
}

TEST(OwnershipTest, ElementsAlreadyOnTheTileAreCopiedLocally) {
  // Full replicas on tiles 0,1 -> halves on tiles 0,1: no exchange.
  const Shape shape = {8};
  const fb::TargetT target = Ipu21Exchange();
  const TransferPlan plan =
      PlanTransfers(BlockedOwnership({1}, 2), BlockedOwnership({2}), shape, 2);
  EXPECT_TRUE(plan.transfers.empty());
  ASSERT_EQ(plan.local_copies.size(), 2u);
  EXPECT_EQ(plan.local_copies[1].tile, 1);
  EXPECT_EQ(plan.local_copies[1].box, MakeBox({{4, 8}}));
  EXPECT_EQ(plan.local_copies[1].bytes, 8);
  const TransferCost cost = CostOfPlan(plan, target);
  EXPECT_EQ(cost.phase_cycles, 0);  // no transfers, no phase
  EXPECT_EQ(cost.local_copy_cycles, 288 + 1);
  EXPECT_EQ(cost.local_copy_bytes, 16);
  EXPECT_EQ(cost.TotalCycles(), 289);

  // Shift by one tile: tile 1 sends its old block on and receives a new one.
  const TransferPlan shifted = PlanTransfers(
      BlockedOwnership({2}), BlockedOwnership({2}, 1, 1), shape, 2);
  ASSERT_EQ(shifted.transfers.size(), 2u);
  EXPECT_EQ(shifted.transfers[0].source_tile, 0);
  EXPECT_EQ(shifted.transfers[0].destination_tiles, std::vector<int>{1});
  EXPECT_EQ(shifted.transfers[1].source_tile, 1);
  EXPECT_EQ(shifted.transfers[1].destination_tiles, std::vector<int>{2});
}

TEST(OwnershipTest, PhaseCostTakesTheSlowestOfBytesAndFragments) {
  // 1 row of 1000 F16 on tile 0 to 1000 single-element flat blocks: the
  // sender pays 1000 fragments (2000 cycles) and 2000 B (500 cycles).
  const Shape shape = {1000};
  const TransferCost cost =
      EstimateTransferCost(BlockedOwnership({1}), FlatOwnership(1, 1000, 1),
                           shape, 2, Ipu21Exchange());
  EXPECT_EQ(cost.transfers, 1000);
  EXPECT_EQ(cost.bound_cycles, 2000);
  EXPECT_EQ(cost.exchange_bottleneck_tile, 0);
  // Bytes dominate with bigger grains: 2000 B in 10 fragments.
  const TransferCost coarse =
      EstimateTransferCost(BlockedOwnership({1}), FlatOwnership(100, 10, 1),
                           shape, 2, Ipu21Exchange());
  EXPECT_EQ(coarse.bound_cycles, 500);
  EXPECT_EQ(coarse.max_bytes_sent, 2000);
  EXPECT_EQ(coarse.max_bytes_received, 200);
}

TEST(OwnershipTest, SiglipShapesDeliverEveryElement) {
  // Too large for brute force: check the totals instead.
  const Shape shape = {729, 4304};
  const int64_t n = 729 * 4304;
  struct Case {
    fb::OwnershipT from, to;
    int64_t destination_copies;  // replicas of the destination
  };
  const std::vector<Case> cases = {
      {BlockedOwnership({9, 6}, 27), BlockedOwnership({6, 27}, 9), 9},
      {BlockedOwnership({729, 2}), FlatOwnership(4, 1472), 1},
      {FlatOwnership(4, 1472), BlockedOwnership({9, 6}, 27), 27},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(FormatOwnership(c.from) + " -> " + FormatOwnership(c.to));
    ASSERT_EQ(ValidateOwnership(c.from, shape, 1472), "");
    ASSERT_EQ(ValidateOwnership(c.to, shape, 1472), "");
    const TransferPlan plan = PlanTransfers(c.from, c.to, shape, 2);
    int64_t delivered = 0, sent = 0;
    for (const Transfer& t : plan.transfers) {
      delivered +=
          t.elements * static_cast<int64_t>(t.destination_tiles.size());
      sent += t.elements;
    }
    for (const LocalCopy& l : plan.local_copies) delivered += l.elements;
    EXPECT_EQ(delivered, n * c.destination_copies);
    EXPECT_LE(sent, n);  // each element is sent at most once
    EXPECT_EQ(CostOfPlan(plan, Ipu21Exchange()),
              EstimateTransferCost(c.from, c.to, shape, 2, Ipu21Exchange()));
  }
}

TEST(OwnershipTest, SamePlacementComparesWhatTilesHold) {
  const Shape shape = {4, 3};
  EXPECT_TRUE(
      SamePlacement(BlockedOwnership({4, 1}), FlatOwnership(3, 4), shape));
  EXPECT_TRUE(
      SamePlacement(FlatOwnership(3, 4), BlockedOwnership({4, 1}), shape));
  EXPECT_FALSE(
      SamePlacement(BlockedOwnership({4, 1}), FlatOwnership(2, 4), shape));
  EXPECT_FALSE(SamePlacement(BlockedOwnership({4, 1}),
                             BlockedOwnership({4, 1}, 1, 1), shape));
  // Replicas hold more than one copy: not the same as a single copy.
  EXPECT_FALSE(SamePlacement(BlockedOwnership({1, 1}, 2),
                             BlockedOwnership({1, 1}), shape));
  EXPECT_FALSE(SamePlacement(BlockedOwnership({1, 1}),
                             BlockedOwnership({1, 1}, 2), shape));
}

// ------------------------------------------------------------ text form

TEST(OwnershipTest, TextFormOmitsDefaults) {
  EXPECT_EQ(FormatOwnership(BlockedOwnership({729, 2})), "blocked(729x2)");
  EXPECT_EQ(FormatOwnership(BlockedOwnership({9, 6}, 27)),
            "blocked(9x6, rep=27)");
  EXPECT_EQ(FormatOwnership(BlockedOwnership({4}, 1, 3, 2)),
            "blocked(4, first=3, stride=2)");
  EXPECT_EQ(FormatOwnership(FlatOwnership(4, 1472)),
            "flat(grain=4, tiles=1472)");
  EXPECT_EQ(FormatOwnership(FlatOwnership(4, 16, 1, 2)),
            "flat(grain=4, tiles=16, first=1, stride=2)");
  EXPECT_EQ(FormatOwnership(Ordered(BlockedOwnership({9, 6}, 27), {0, 2, 1})),
            "blocked(9x6, rep=27, order=0,2,1)");
  EXPECT_EQ(FormatOwnership(Ordered(BlockedOwnership({9, 6}, 27), {0, 1, 2})),
            "blocked(9x6, rep=27)");
}

TEST(OwnershipTest, TextFormIsThePrintersText) {
  // One implementation: the algebra's text is the IR printer's.
  for (const fb::OwnershipT& o :
       {BlockedOwnership({729, 2}), FlatOwnership(4, 1472, 3, 2),
        Ordered(BlockedOwnership({6, 27}, 9, 1, 1), {2, 1, 0})}) {
    EXPECT_EQ(FormatOwnership(o), ir::OwnershipText(o));
  }
}

TEST(OwnershipTest, ParserAcceptsSpacesAnyOrderAndExplicitDefaults) {
  struct Case {
    const char* text;
    fb::OwnershipT expected;
  };
  const std::vector<Case> cases = {
      {"blocked(729x2)", BlockedOwnership({729, 2})},
      {"  blocked( 9 x 6 , rep = 27 ) ", BlockedOwnership({9, 6}, 27)},
      {"blocked(3, rep=1, first=0, stride=1)", BlockedOwnership({3})},
      {"blocked(2x3x4x5, stride=3, first=7, rep=2)",
       BlockedOwnership({2, 3, 4, 5}, 2, 7, 3)},
      {"flat(grain=4, tiles=1472)", FlatOwnership(4, 1472)},
      {"flat(tiles=16,grain=4,first=1,stride=2)", FlatOwnership(4, 16, 1, 2)},
      {"blocked(9x6, rep=27, order=0,2,1)",
       Ordered(BlockedOwnership({9, 6}, 27), {0, 2, 1})},
      {"blocked(9x6,order= 0 , 2,1 ,rep=27, first=2)",
       Ordered(BlockedOwnership({9, 6}, 27, 2), {0, 2, 1})},
      {"blocked(4, order=1,0)", Ordered(BlockedOwnership({4}), {1, 0})},
  };
  for (const Case& c : cases) {
    std::string error;
    const std::optional<fb::OwnershipT> o = ParseOwnership(c.text, &error);
    ASSERT_TRUE(o.has_value()) << c.text << ": " << error;
    EXPECT_TRUE(SameOwnership(*o, c.expected))
        << c.text << " parsed as " << FormatOwnership(*o);
  }
}

TEST(OwnershipTest, ParserRejectsGarbageWithAClearMessage) {
  struct Case {
    const char* text;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"", "expected 'blocked' or 'flat' at offset 0"},
      {"Blocked(4)", "expected 'blocked' or 'flat'"},
      {"sharded(4)", "unknown ownership kind 'sharded'"},
      {"blocked", "expected '(' at offset 7"},
      {"blocked()", "expected a non-negative integer at offset 8"},
      {"blocked(9x)", "expected a non-negative integer at offset 10"},
      {"blocked(9x6", "expected ','"},
      {"blocked(9x6) extra", "unexpected text after the closing ')'"},
      {"blocked(0x6)", "a partition count must be at least 1"},
      {"blocked(1x2x3x4x5)", "more than 4 axes"},
      {"blocked(9; rep=2)", "expected ','"},
      {"blocked(9,)", "expected an option name"},
      {"blocked(9, rep=0)", "rep must be at least 1"},
      {"blocked(9, rep=-2)", "expected a non-negative integer"},
      {"blocked(9, grain=4)", "unknown option 'grain' for blocked"},
      {"blocked(9, rep=2, rep=3)", "option 'rep' given twice"},
      {"blocked(9, rep 2)", "expected '='"},
      {"flat(grain=4)", "flat needs tiles="},
      {"flat(tiles=4)", "flat needs grain="},
      {"flat()", "flat needs grain= and tiles="},
      {"flat(grain=4 tiles=4)", "expected ','"},
      {"flat(grain=4, tiles=99999999999)", "number too large"},
      {"flat(grain=4, tiles=4, rep=2)", "unknown option 'rep' for flat"},
      {"flat(grain=4, tiles=0)", "tiles must be at least 1"},
      {"flat(4, 4)", "expected an option name"},
      {"blocked(9x6, order=0,1)", "order must list each grid axis 0..2 once"},
      {"blocked(9x6, order=0,1,1)", "order must list each grid axis 0..2"},
      {"blocked(9x6, order=0,1,2,3,4,5,6,7,8,9)", "order lists more than 9 axes"},
      {"blocked(9x6, sub=3)", "sub= needs one count per axis"},
      {"blocked(9x6, sub=3x1, order=0,1,2)", "order must list each grid axis 0..4 once"},
      {"blocked(9x6, order=)", "expected a non-negative integer"},
      {"blocked(9x6, order=0,2,1, order=0,1,2)", "option 'order' given twice"},
      {"flat(grain=4, tiles=4, order=0)", "unknown option 'order' for flat"},
  };
  for (const Case& c : cases) {
    std::string error;
    EXPECT_FALSE(ParseOwnership(c.text, &error).has_value()) << c.text;
    EXPECT_NE(error.find(c.message), std::string::npos)
        << "for \"" << c.text << "\" got: " << error;
    EXPECT_NE(error.find(c.text), std::string::npos) << error;
  }
}

// ------------------------------------------------------------ validation

TEST(OwnershipTest, ValidationRejectsBadInputs) {
  struct Case {
    fb::OwnershipT ownership;
    Shape shape;
    int tiles;
    const char* message;
  };
  fb::OwnershipT blocked_with_grain = BlockedOwnership({2});
  blocked_with_grain.grain = 4;
  fb::OwnershipT flat_with_replicas = FlatOwnership(4, 2);
  flat_with_replicas.replicas = 2;
  fb::OwnershipT bad_kind = BlockedOwnership({2});
  bad_kind.kind = static_cast<fb::OwnershipKind>(7);
  const std::vector<Case> cases = {
      {BlockedOwnership({9, 6}),
       {729},
       1472,
       "2 partition counts for a value of rank 1"},
      {BlockedOwnership({}), {}, 1472, "rank 0 cannot be owned"},
      {BlockedOwnership({1, 1, 1, 1, 1}), {1, 1, 1, 1, 1}, 1472, "rank 5"},
      {BlockedOwnership({2}), {-3}, 1472, "negative extent -3 on axis 0"},
      {BlockedOwnership({1, 1}),
       {int64_t{1} << 40, int64_t{1} << 40},
       1472,
       "more than 2^56 elements"},
      {BlockedOwnership({2, 0}), {4, 4}, 1472, "0 parts on axis 1"},
      {BlockedOwnership({2}, 0), {4}, 1472, "0 replicas"},
      {BlockedOwnership({2}, 1, -1), {4}, 1472, "starts at tile -1"},
      {BlockedOwnership({2}, 1, 0, 0), {4}, 1472, "tile stride 0"},
      {BlockedOwnership({9, 6}, 28),
       {729, 4304},
       1472,
       "needs 1512 tiles but the target has 1472"},
      {BlockedOwnership({1000000, 1000000}, 1000000),
       {10, 10},
       1472,
       "needs at least 1000000 tiles but the target has 1472"},
      {BlockedOwnership({9, 6}, 27, 15),
       {729, 4304},
       1472,
       "uses tiles up to 1472 but the target has 1472 tiles"},
      {FlatOwnership(4, 16, 0, 2), {100}, 16, "uses tiles up to 30"},
      {FlatOwnership(0, 16), {100}, 16, "grain 0"},
      {FlatOwnership(4, 0), {100}, 16, "0 tiles"},
      {blocked_with_grain, {8}, 16, "must leave grain and tiles unset"},
      {flat_with_replicas,
       {8},
       16,
       "must leave partitions, sub-partitions, replicas and axis order unset"},
      {bad_kind, {8}, 16, "unknown ownership kind 7"},
      {Nested(BlockedOwnership({2, 2}), {1, 1}),
       {4, 4},
       16,
       "sub-partitions that are all 1: leave them out"},
      {Nested(BlockedOwnership({2, 2}), {2}),
       {4, 4},
       16,
       "1 sub-partition counts for a value of rank 2"},
      {Nested(BlockedOwnership({2, 2}), {2, 0}), {4, 4}, 16, "0 sub-parts"},
      {Nested(BlockedOwnership({2, 2}), {4, 2}),
       {4, 4},
       16,
       "needs at least 32 tiles but the target has 16"},
      {BlockedOwnership({2}), {8}, 0, "the target has no tiles"},
      {Ordered(BlockedOwnership({2, 2}), {0, 1}),
       {4, 4},
       16,
       "axis order 0,1, which is not a permutation of the grid axes 0..2"},
      {Ordered(BlockedOwnership({2, 2}), {0, 3, 1}),
       {4, 4},
       16,
       "not a permutation"},
      {Ordered(FlatOwnership(4, 2), {0}),
       {8},
       16,
       "must leave partitions, sub-partitions, replicas and axis order unset"},
  };
  for (const Case& c : cases) {
    const std::string error = ValidateOwnership(c.ownership, c.shape, c.tiles);
    EXPECT_NE(error.find(c.message), std::string::npos)
        << FormatOwnership(c.ownership) << " got: \"" << error << "\"";
  }
}

TEST(OwnershipTest, ValidationAcceptsTheSiglipOwnerships) {
  const Shape shape = {729, 4304};
  for (const char* text :
       {"blocked(9x6, rep=27)", "blocked(6x27, rep=9)", "blocked(729x2)",
        "flat(grain=4, tiles=1472)", "blocked(1x1, rep=1472)"}) {
    const std::optional<fb::OwnershipT> o = ParseOwnership(text);
    ASSERT_TRUE(o.has_value()) << text;
    EXPECT_EQ(ValidateOwnership(*o, shape, 1472), "") << text;
  }
  // The last tile of the target may be used.
  EXPECT_EQ(ValidateOwnership(BlockedOwnership({9, 6}, 27, 14), shape, 1472),
            "");
  EXPECT_EQ(ValidateOwnership(FlatOwnership(4, 8, 1, 2), shape, 16), "");
}

TEST(OwnershipTest, EmptyValuesHaveNothingToMove) {
  const Shape shape = {0, 5};
  const fb::OwnershipT a = BlockedOwnership({2, 2}, 2);
  const fb::OwnershipT b = FlatOwnership(3, 4, 8);
  ASSERT_EQ(ValidateOwnership(a, shape, 16), "");
  ASSERT_EQ(ValidateOwnership(b, shape, 16), "");
  EXPECT_TRUE(HeldBoxes(a, shape, 0).empty());
  EXPECT_TRUE(HeldBoxes(b, shape, 8).empty());
  EXPECT_TRUE(TilesUsed(b, shape).empty());
  EXPECT_EQ(MaxBytesPerTile(a, shape, 4), 0);
  EXPECT_TRUE(Intersect(a, b, shape).empty());
  const TransferPlan plan = PlanTransfers(a, b, shape, 2);
  EXPECT_TRUE(plan.transfers.empty());
  EXPECT_TRUE(plan.local_copies.empty());
  EXPECT_EQ(EstimateTransferCost(a, b, shape, 2, Ipu21Exchange()),
            TransferCost{});
}

TEST(OwnershipDeathTest, QueriesRefuseInvalidOwnerships) {
  const Shape shape = {4, 4};
  EXPECT_DEATH(HeldBoxes(BlockedOwnership({2}), shape, 0),
               "1 partition counts for a value of rank 2");
  EXPECT_DEATH(
      PlanTransfers(FlatOwnership(0, 2), FlatOwnership(1, 2), shape, 2),
      "grain 0");
  EXPECT_DEATH(
      PlanTransfers(FlatOwnership(1, 2), FlatOwnership(1, 2), shape, 0),
      "element_bytes");
}

// ------------------------------------------------------------ properties

constexpr int kCases = 300;

TEST(OwnershipPropertyTest, HeldBoxesMatchBruteForce) {
  std::mt19937 rng(1234);
  for (int i = 0; i < kCases; ++i) {
    const Shape shape = RandomShape(rng);
    const fb::OwnershipT o = RandomOwnership(rng, shape);
    SCOPED_TRACE(FormatOwnership(o) + " case " + std::to_string(i));
    const Holds holds = BruteHolds(o, shape);
    const int64_t n = NumElements(shape);
    std::vector<int> used;
    int64_t max_elements = 0;
    for (int tile = 0; tile < kTiles; ++tile) {
      std::vector<char> covered(n, 0);
      const std::vector<Box> boxes = HeldBoxes(o, shape, tile);
      EXPECT_LE(boxes.size(), 2 * shape.size() - 1);
      for (size_t b = 0; b < boxes.size(); ++b) {
        EXPECT_FALSE(boxes[b].Empty());
        if (b > 0) {
          EXPECT_LT(boxes[b - 1].begin, boxes[b].begin);
        }
        for (int64_t e : BoxElements(boxes[b], shape)) {
          EXPECT_EQ(covered[e], 0) << "boxes overlap";
          covered[e] = 1;
        }
      }
      ASSERT_EQ(covered, holds[tile]) << "tile " << tile;
      const int64_t count = std::count(covered.begin(), covered.end(), 1);
      EXPECT_EQ(HeldElements(o, shape, tile), count);
      if (count > 0) used.push_back(tile);
      max_elements = std::max(max_elements, count);
    }
    EXPECT_EQ(TilesUsed(o, shape), used);
    EXPECT_EQ(MaxBytesPerTile(o, shape, 2), 2 * max_elements);
    const std::vector<int64_t> bytes = BytesPerTile(o, shape, 2, kTiles);
    for (int tile = 0; tile < kTiles; ++tile) {
      EXPECT_EQ(bytes[tile],
                2 * std::count(holds[tile].begin(), holds[tile].end(), 1))
          << "tile " << tile;
    }
  }
}

TEST(OwnershipPropertyTest, IntersectionMatchesBruteForce) {
  std::mt19937 rng(99);
  for (int i = 0; i < kCases; ++i) {
    const Shape shape = RandomShape(rng);
    const fb::OwnershipT a = RandomOwnership(rng, shape);
    const fb::OwnershipT b = RandomOwnership(rng, shape);
    SCOPED_TRACE(FormatOwnership(a) + " & " + FormatOwnership(b) + " case " +
                 std::to_string(i));
    const Holds ha = BruteHolds(a, shape);
    const Holds hb = BruteHolds(b, shape);
    const std::vector<Overlap> overlaps = Intersect(a, b, shape);
    std::set<std::tuple<int, int, int64_t>> seen;
    for (size_t k = 0; k < overlaps.size(); ++k) {
      const Overlap& o = overlaps[k];
      EXPECT_FALSE(o.box.Empty());
      if (k > 0) {
        const Overlap& p = overlaps[k - 1];
        EXPECT_LT(std::tie(p.a_tile, p.b_tile, p.box.begin),
                  std::tie(o.a_tile, o.b_tile, o.box.begin));
      }
      for (int64_t e : BoxElements(o.box, shape)) {
        EXPECT_TRUE(ha[o.a_tile][e] && hb[o.b_tile][e]);
        EXPECT_TRUE(seen.insert({o.a_tile, o.b_tile, e}).second)
            << "element " << e << " twice for tiles " << o.a_tile << ", "
            << o.b_tile;
      }
    }
    // Nothing missing: as many (tile, tile, element) triples as brute force.
    int64_t expected = 0;
    for (int64_t e = 0; e < NumElements(shape); ++e) {
      int64_t na = 0, nb = 0;
      for (int t = 0; t < kTiles; ++t) na += ha[t][e], nb += hb[t][e];
      expected += na * nb;
    }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), expected);
  }
}

TEST(OwnershipPropertyTest, TransfersDeliverEveryElementExactlyOnce) {
  std::mt19937 rng(2024);
  const fb::TargetT target = Ipu21Exchange();
  // How often the generator hit the interesting cases, so that a change to
  // it cannot quietly make this test trivial.
  int flat_to_blocked = 0, blocked_to_blocked = 0, flat_to_flat = 0,
      multicasts = 0, with_local_copies = 0, replicated_sources = 0,
      ordered = 0;
  for (int i = 0; i < kCases; ++i) {
    const Shape shape = RandomShape(rng);
    const fb::OwnershipT src = RandomOwnership(rng, shape);
    const fb::OwnershipT dst = RandomOwnership(rng, shape);
    const int element_bytes = 1
                              << std::uniform_int_distribution<int>(0, 2)(rng);
    SCOPED_TRACE(FormatOwnership(src) + " -> " + FormatOwnership(dst) +
                 " case " + std::to_string(i));
    const Holds hs = BruteHolds(src, shape);
    const Holds hd = BruteHolds(dst, shape);
    const int64_t n = NumElements(shape);
    const TransferPlan plan = PlanTransfers(src, dst, shape, element_bytes);

    std::vector<std::vector<int>> arrivals(kTiles, std::vector<int>(n, 0));
    std::vector<int> times_sent(n, 0);
    for (size_t k = 0; k < plan.transfers.size(); ++k) {
      const Transfer& t = plan.transfers[k];
      if (k > 0) {
        const Transfer& p = plan.transfers[k - 1];
        EXPECT_LT(std::tie(p.source_tile, p.box.begin),
                  std::tie(t.source_tile, t.box.begin));
      }
      EXPECT_FALSE(t.box.Empty());
      EXPECT_EQ(t.elements, t.box.Elements());
      EXPECT_EQ(t.bytes, t.elements * element_bytes);
      ASSERT_FALSE(t.destination_tiles.empty());
      EXPECT_TRUE(std::is_sorted(t.destination_tiles.begin(),
                                 t.destination_tiles.end()));
      EXPECT_EQ(std::adjacent_find(t.destination_tiles.begin(),
                                   t.destination_tiles.end()),
                t.destination_tiles.end());
      for (int64_t e : BoxElements(t.box, shape)) {
        EXPECT_TRUE(hs[t.source_tile][e]) << "source lacks element " << e;
        // Multicast grouping: each element travels in one transfer at most,
        // so the senders pay for it once.
        ++times_sent[e];
        for (int d : t.destination_tiles) {
          EXPECT_NE(d, t.source_tile);
          EXPECT_FALSE(hs[d][e]) << "tile " << d << " already had " << e;
          ++arrivals[d][e];
        }
      }
    }
    for (const LocalCopy& c : plan.local_copies) {
      EXPECT_EQ(c.elements, c.box.Elements());
      EXPECT_EQ(c.bytes, c.elements * element_bytes);
      for (int64_t e : BoxElements(c.box, shape)) {
        EXPECT_TRUE(hs[c.tile][e]);
        ++arrivals[c.tile][e];
      }
    }
    int64_t received_elements = 0, copied_elements = 0, sent_elements = 0;
    for (int64_t e = 0; e < n; ++e) {
      bool needs_exchange = false;
      for (int t = 0; t < kTiles; ++t) {
        ASSERT_EQ(arrivals[t][e], hd[t][e] ? 1 : 0)
            << "tile " << t << " element " << e;
        if (hd[t][e] && hs[t][e]) ++copied_elements;
        if (hd[t][e] && !hs[t][e]) ++received_elements, needs_exchange = true;
      }
      EXPECT_EQ(times_sent[e], needs_exchange ? 1 : 0);
      sent_elements += needs_exchange;
    }
    const TransferCost cost = CostOfPlan(plan, target);
    EXPECT_EQ(cost.bytes_received, received_elements * element_bytes);
    EXPECT_EQ(cost.bytes_sent, sent_elements * element_bytes);
    EXPECT_EQ(cost.local_copy_bytes, copied_elements * element_bytes);
    EXPECT_EQ(cost.transfers, static_cast<int64_t>(plan.transfers.size()));
    const TransferCost reference = ReferenceCost(plan, target);
    EXPECT_EQ(cost.bound_cycles, reference.bound_cycles);
    EXPECT_EQ(cost.local_copy_cycles, reference.local_copy_cycles);
    EXPECT_EQ(cost,
              EstimateTransferCost(src, dst, shape, element_bytes, target));
    const bool src_flat = src.kind == fb::OwnershipKind::Flat;
    const bool dst_flat = dst.kind == fb::OwnershipKind::Flat;
    flat_to_blocked += src_flat && !dst_flat;
    blocked_to_blocked += !src_flat && !dst_flat;
    flat_to_flat += src_flat && dst_flat;
    with_local_copies += !plan.local_copies.empty();
    replicated_sources += src.replicas > 1 && !plan.transfers.empty();
    ordered += !src.axis_order.empty() && !dst.axis_order.empty();
    multicasts += std::any_of(
        plan.transfers.begin(), plan.transfers.end(),
        [](const Transfer& t) { return t.destination_tiles.size() > 1; });
  }
  EXPECT_GE(flat_to_blocked, 30);
  EXPECT_GE(blocked_to_blocked, 30);
  EXPECT_GE(flat_to_flat, 15);
  EXPECT_GE(multicasts, 30);
  EXPECT_GE(with_local_copies, 30);
  EXPECT_GE(replicated_sources, 30);
  EXPECT_GE(ordered, 20);
}

// Transfers into an ownership of a view (a sub-box of the value): every
// element of the view reaches every tile that owns it there, exactly once,
// from a tile that holds it, and nothing outside the view moves.
TEST(OwnershipPropertyTest, TransfersIntoAViewDeliverExactlyTheView) {
  std::mt19937 rng(77);
  const fb::TargetT target = Ipu21Exchange();
  int flat_sources = 0, with_local = 0;
  for (int i = 0; i < kCases; ++i) {
    const Shape shape = RandomShape(rng);
    Box view;
    view.rank = static_cast<int>(shape.size());
    Shape view_shape(shape.size());
    for (size_t a = 0; a < shape.size(); ++a) {
      view.begin[a] = std::uniform_int_distribution<int64_t>(0, shape[a] - 1)(rng);
      view.end[a] =
          std::uniform_int_distribution<int64_t>(view.begin[a] + 1, shape[a])(rng);
      view_shape[a] = view.end[a] - view.begin[a];
    }
    const fb::OwnershipT src = RandomOwnership(rng, shape);
    fb::OwnershipT dst;
    do {
      dst = RandomOwnership(rng, view_shape);
    } while (dst.kind == fb::OwnershipKind::Flat);
    SCOPED_TRACE(FormatOwnership(src) + " -> " + FormatOwnership(dst) +
                 " of " + FormatBox(view) + " case " + std::to_string(i));
    const Holds hs = BruteHolds(src, shape);
    const Holds hv = BruteHolds(dst, view_shape);
    const int64_t n = NumElements(shape);
    // What each tile must hold afterwards, in the value's element numbers.
    Holds hd(kTiles, std::vector<char>(n, 0));
    for (int64_t e = 0; e < NumElements(view_shape); ++e) {
      std::vector<int64_t> c = Coordinates(view_shape, e);
      int64_t flat = 0;
      for (size_t a = 0; a < shape.size(); ++a) {
        flat = flat * shape[a] + c[a] + view.begin[a];
      }
      for (int t = 0; t < kTiles; ++t) hd[t][flat] = hv[t][e];
    }
    for (int t = 0; t < kTiles; ++t) {
      std::vector<char> held(n, 0);
      for (const Box& b : HeldBoxes(dst, shape, t, &view)) {
        for (int64_t e : BoxElements(b, shape)) held[e] = 1;
      }
      ASSERT_EQ(held, hd[t]) << "tile " << t;
    }
    const TransferPlan plan = PlanTransfers(src, dst, shape, 2, &view);
    std::vector<std::vector<int>> arrivals(kTiles, std::vector<int>(n, 0));
    for (const Transfer& t : plan.transfers) {
      for (int64_t e : BoxElements(t.box, shape)) {
        EXPECT_TRUE(hs[t.source_tile][e]);
        for (int d : t.destination_tiles) ++arrivals[d][e];
      }
    }
    for (const LocalCopy& c : plan.local_copies) {
      for (int64_t e : BoxElements(c.box, shape)) {
        EXPECT_TRUE(hs[c.tile][e]);
        ++arrivals[c.tile][e];
      }
    }
    for (int t = 0; t < kTiles; ++t) {
      for (int64_t e = 0; e < n; ++e) {
        ASSERT_EQ(arrivals[t][e], hd[t][e] ? 1 : 0)
            << "tile " << t << " element " << e;
      }
    }
    EXPECT_EQ(CostOfPlan(plan, target),
              EstimateTransferCost(src, dst, shape, 2, target, &view));
    std::vector<std::pair<int, Box>> local;
    ForEachLocalCopy(src, dst, shape,
                     [&](int t, const Box& b) { local.push_back({t, b}); }, &view);
    ASSERT_EQ(local.size(), plan.local_copies.size());
    for (size_t k = 0; k < local.size(); ++k) {
      EXPECT_EQ(local[k].first, plan.local_copies[k].tile);
      EXPECT_EQ(local[k].second, plan.local_copies[k].box);
    }
    flat_sources += src.kind == fb::OwnershipKind::Flat;
    with_local += !plan.local_copies.empty();
  }
  EXPECT_GE(flat_sources, 30);
  EXPECT_GE(with_local, 30);
}

TEST(OwnershipPropertyTest, SamePlacementMatchesBruteForce) {
  std::mt19937 rng(7);
  int same = 0, flat_equivalents = 0;
  for (int i = 0; i < kCases; ++i) {
    const Shape shape = RandomShape(rng);
    fb::OwnershipT a = RandomOwnership(rng, shape);
    fb::OwnershipT b = RandomOwnership(rng, shape);
    // Every other case has equal placements: a rows-only blocked ownership
    // against itself or, when the rows divide evenly, against the flat
    // ownership with one grain of whole rows per tile.
    if (i % 2 == 0 && a.kind == fb::OwnershipKind::Blocked && a.replicas == 1) {
      const int32_t parts = a.partitions[0];
      a.partitions.assign(shape.size(), 1);
      a.partitions[0] = parts;
      b = a;
      if (shape[0] % parts == 0) {
        b = FlatOwnership(static_cast<int>(NumElements(shape) / parts), parts,
                          a.first_tile, a.tile_stride);
        ++flat_equivalents;
      }
    }
    const bool expected = BruteHolds(a, shape) == BruteHolds(b, shape);
    same += expected;
    EXPECT_EQ(SamePlacement(a, b, shape), expected)
        << FormatOwnership(a) << " vs " << FormatOwnership(b);
  }
  // The equivalent pairs were exercised.
  EXPECT_GT(same, 20);
  EXPECT_GT(flat_equivalents, 10);
}

TEST(OwnershipPropertyTest, ForEachHeldBoxesIsHeldBoxesOfEveryTile) {
  std::mt19937 rng(31);
  for (int i = 0; i < kCases; ++i) {
    const Shape shape = RandomShape(rng);
    const fb::OwnershipT o = RandomOwnership(rng, shape);
    SCOPED_TRACE(FormatOwnership(o) + " case " + std::to_string(i));
    std::vector<int> tiles;
    ForEachHeldBoxes(o, shape, [&](int tile, std::span<const Box> boxes) {
      tiles.push_back(tile);
      EXPECT_EQ(std::vector<Box>(boxes.begin(), boxes.end()),
                HeldBoxes(o, shape, tile))
          << "tile " << tile;
    });
    EXPECT_EQ(tiles, TilesUsed(o, shape));
  }
}

TEST(OwnershipPropertyTest, ForEachLocalCopyListsThePlansLocalCopies) {
  std::mt19937 rng(4242);
  int copies = 0;
  for (int i = 0; i < kCases; ++i) {
    const Shape shape = RandomShape(rng);
    const fb::OwnershipT src = RandomOwnership(rng, shape);
    const fb::OwnershipT dst = RandomOwnership(rng, shape);
    SCOPED_TRACE(FormatOwnership(src) + " -> " + FormatOwnership(dst));
    std::vector<std::pair<int, Box>> listed;
    ForEachLocalCopy(src, dst, shape, [&](int tile, const Box& box) {
      listed.push_back({tile, box});
    });
    const TransferPlan plan = PlanTransfers(src, dst, shape, 2);
    std::vector<std::pair<int, Box>> expected;
    for (const LocalCopy& c : plan.local_copies) {
      expected.push_back({c.tile, c.box});
    }
    EXPECT_EQ(listed, expected);
    copies += static_cast<int>(expected.size());
  }
  EXPECT_GT(copies, 100);
}

TEST(OwnershipPropertyTest, TextFormRoundTrips) {
  std::mt19937 rng(5);
  for (int i = 0; i < kCases; ++i) {
    Shape shape = RandomShape(rng);
    if (i % 3 == 0) shape.push_back(2);  // rank 4 too
    const fb::OwnershipT o = RandomOwnership(rng, shape);
    const std::string text = FormatOwnership(o);
    std::string error;
    const std::optional<fb::OwnershipT> parsed = ParseOwnership(text, &error);
    ASSERT_TRUE(parsed.has_value()) << text << ": " << error;
    EXPECT_TRUE(SameOwnership(*parsed, o)) << text;
    EXPECT_EQ(FormatOwnership(*parsed), text);
  }
}

// Weight homes: every element on exactly one tile, the tiles' parts within
// one grain of each other, as many tiles as there are grains (up to the
// target), placed at the hint when the home fits there.
TEST(OwnershipPropertyTest, HomesHoldEveryElementOnceBalanced) {
  std::mt19937 rng(4321);
  for (int i = 0; i < kCases; ++i) {
    const Shape shape = RandomShape(rng);
    const int element_bytes = 1 << std::uniform_int_distribution<int>(0, 2)(rng);
    const int target_tiles = std::uniform_int_distribution<int>(1, kTiles)(rng);
    const int hint = std::uniform_int_distribution<int>(0, kTiles)(rng);
    const fb::OwnershipT home =
        HomeOwnership(shape, element_bytes, target_tiles, hint);
    SCOPED_TRACE(FormatOwnership(home) + " case " + std::to_string(i));
    ASSERT_EQ(ValidateOwnership(home, shape, target_tiles), "");
    const int64_t n = NumElements(shape);
    std::vector<int> holders(n, 0);
    int64_t most = 0, least = n + 1;
    for (int tile = 0; tile < target_tiles; ++tile) {
      int64_t held = 0;
      for (const Box& box : HeldBoxes(home, shape, tile)) {
        for (int64_t e : BoxElements(box, shape)) ++holders[e];
        held += box.Elements();
      }
      if (held == 0) continue;
      most = std::max(most, held);
      least = std::min(least, held);
    }
    EXPECT_EQ(std::count(holders.begin(), holders.end(), 1), n)
        << "an element held by no tile or by two";
    const int64_t grain = std::max(1, 8 / element_bytes);
    EXPECT_EQ(home.grain, grain);
    const int64_t grains = std::max<int64_t>(1, (n + grain - 1) / grain);
    EXPECT_EQ(home.tiles, std::min<int64_t>(grains, target_tiles));
    if (n > 0) {
      EXPECT_LE(most - least, 2 * grain - 1);
    }
    EXPECT_EQ(home.first_tile, std::min(hint, target_tiles - home.tiles));
  }
  // The so400m up projection in FP8 on ipu21: 3,368 or 3,376 B a tile.
  const Shape up = {1152, 4304};
  const fb::OwnershipT home = HomeOwnership(up, 1, 1472);
  EXPECT_EQ(FormatOwnership(home), "flat(grain=8, tiles=1472)");
  EXPECT_EQ(MaxBytesPerTile(home, up, 1), 3376);
}

bool Contains(const Box& outer, const Box& inner) {
  for (int a = 0; a < inner.rank; ++a) {
    if (inner.begin[a] < outer.begin[a] || inner.end[a] > outer.end[a]) {
      return false;
    }
  }
  return true;
}

// A delivery home holds every element once, each slab on a tile that needs
// it in the layout, and each block in exactly `parts` slabs.
TEST(OwnershipPropertyTest, DeliveryHomesHoldEveryElementOnceWhereItIsNeeded) {
  std::mt19937 rng(11);
  for (int i = 0; i < 300; ++i) {
    const bool vector = i % 2 == 0;
    const Shape shape = vector ? Shape{1 + static_cast<int64_t>(rng() % 40)}
                               : Shape{1 + static_cast<int64_t>(rng() % 30),
                                       1 + static_cast<int64_t>(rng() % 30)};
    const int rank = static_cast<int>(shape.size());
    std::vector<int32_t> partitions;
    for (int a = 0; a < rank; ++a) partitions.push_back(1 + rng() % 4);
    const int replicas = 1 + rng() % 6;
    const int stride = 1 + rng() % 2;
    fb::OwnershipT layout =
        BlockedOwnership(partitions, replicas, rng() % 5, stride);
    if (i % 3 == 0) {  // replicas slowest, as a GEMM's right operand
      layout.axis_order = {rank};
      for (int a = 0; a < rank; ++a) layout.axis_order.push_back(a);
    }
    const int tiles = 256;
    ASSERT_EQ(ValidateOwnership(layout, shape, tiles), "");
    for (int parts = 1; parts <= replicas; ++parts) {
      const int hint = static_cast<int>(rng() % 7);
      const std::optional<fb::OwnershipT> home =
          DeliveryHome(layout, parts, hint);
      if (replicas % parts != 0) {
        EXPECT_FALSE(home.has_value());
        continue;
      }
      ASSERT_TRUE(home.has_value());
      SCOPED_TRACE(FormatOwnership(layout) + " -> " + FormatOwnership(*home));
      ASSERT_EQ(ValidateOwnership(*home, shape, tiles), "");
      std::vector<int> holders(NumElements(shape), 0);
      for (int tile = 0; tile < tiles; ++tile) {
        const std::vector<Box> held = HeldBoxes(*home, shape, tile);
        for (const Box& box : held) {
          for (int64_t e : BoxElements(box, shape)) ++holders[e];
          const std::vector<Box> needed = HeldBoxes(layout, shape, tile);
          EXPECT_TRUE(std::any_of(needed.begin(), needed.end(),
                                  [&](const Box& b) {
                                    return Contains(b, box);
                                  }))
              << "tile " << tile << " holds " << FormatBox(box)
              << " but needs no block containing it";
        }
      }
      EXPECT_EQ(std::count(holders.begin(), holders.end(), 1),
                static_cast<int64_t>(holders.size()));
      EXPECT_EQ(GridCells(*home), GridCells(layout) / replicas * parts);
    }
  }
  // No replicas: the home is the layout itself, nothing to deliver.
  const fb::OwnershipT single = BlockedOwnership({4, 2}, 1, 3);
  EXPECT_TRUE(SameOwnership(*DeliveryHome(single, 1, 5), single));
  EXPECT_FALSE(DeliveryHome(FlatOwnership(2, 8), 1).has_value());
}

// A spread home holds every element once, no tile more than one slab, and
// each block in exactly `parts` contiguous slabs along its first axis.
TEST(OwnershipPropertyTest, SpreadHomesHoldEveryElementOnceInSlabs) {
  std::mt19937 rng(12);
  const int tiles = 64;
  for (int i = 0; i < 200; ++i) {
    const Shape shape = {1 + static_cast<int64_t>(rng() % 30),
                         1 + static_cast<int64_t>(rng() % 30)};
    const fb::OwnershipT layout = BlockedOwnership(
        {static_cast<int32_t>(1 + rng() % 4), static_cast<int32_t>(1 + rng() % 4)},
        1, rng() % 5, 1 + rng() % 2);
    const int parts = 1 + static_cast<int>(rng() % 8);
    const int hint = static_cast<int>(rng() % 100);
    const std::optional<fb::OwnershipT> home =
        SpreadHome(layout, parts, tiles, hint);
    const int64_t cells = GridCells(layout) * parts;
    if (cells > tiles) {
      EXPECT_FALSE(home.has_value());
      continue;
    }
    ASSERT_TRUE(home.has_value());
    SCOPED_TRACE(FormatOwnership(layout) + " -> " + FormatOwnership(*home));
    ASSERT_EQ(ValidateOwnership(*home, shape, tiles), "");
    EXPECT_EQ(GridCells(*home), cells);
    std::vector<int> holders(NumElements(shape), 0);
    for (int tile = 0; tile < tiles; ++tile) {
      const std::vector<Box> held = HeldBoxes(*home, shape, tile);
      EXPECT_LE(held.size(), 1u) << "tile " << tile;
      for (const Box& box : held) {
        for (int64_t e : BoxElements(box, shape)) ++holders[e];
        // The slab spans its block's columns: one run in the block.
        bool in_a_block = false;
        for (int t = 0; t < tiles && !in_a_block; ++t) {
          for (const Box& b : HeldBoxes(layout, shape, t)) {
            in_a_block = in_a_block ||
                         (Contains(b, box) && b.begin[1] == box.begin[1] &&
                          b.end[1] == box.end[1]);
          }
        }
        EXPECT_TRUE(in_a_block) << FormatBox(box);
      }
    }
    EXPECT_EQ(std::count(holders.begin(), holders.end(), 1),
              static_cast<int64_t>(holders.size()));
  }
  EXPECT_FALSE(SpreadHome(BlockedOwnership({2, 2}, 2), 2, tiles).has_value());
}

// A [rows, 1] column used along the rows of a value in `layout`: every
// tile that holds a box of the value holds that box's rows of the column,
// in one box (the lowering reads them as one contiguous slice).
TEST(OwnershipTest, RowColumnOwnershipHoldsEachTilesRows) {
  const Shape shape = {10, 12}, column = {10, 1};
  const std::pair<const char*, const char*> cases[] = {
      {"blocked(4x3)", "blocked(4x1, rep=3)"},
      {"blocked(4x3, order=1,0,2)", "blocked(4x1, rep=3, order=2,0,1)"},
      {"blocked(2x3, first=5, stride=2)",
       "blocked(2x1, rep=3, first=5, stride=2)"},
      {"blocked(3x2, sub=2x1)", ""},
      {"blocked(2x2, sub=1x2)", ""},
      {"blocked(2x2, sub=2x2, order=1,3,0,2,4)", ""},
      {"flat(grain=4, tiles=7)", "blocked(1x1, rep=7)"},
  };
  for (const auto& [text, want] : cases) {
    std::string error;
    std::optional<fb::OwnershipT> layout = ParseOwnership(text, &error);
    ASSERT_TRUE(layout.has_value()) << error;
    ASSERT_EQ(ValidateOwnership(*layout, shape, 1472), "") << text;
    std::optional<fb::OwnershipT> v = RowColumnOwnership(*layout);
    ASSERT_TRUE(v.has_value()) << text;
    EXPECT_EQ(ValidateOwnership(*v, column, 1472), "") << FormatOwnership(*v);
    if (*want != '\0') {
      EXPECT_EQ(FormatOwnership(*v), want) << text;
    }
    for (int t : TilesUsed(*layout, shape)) {
      const std::vector<Box> held = HeldBoxes(*v, column, t);
      ASSERT_EQ(held.size(), 1u) << text << " tile " << t;
      for (const Box& b : HeldBoxes(*layout, shape, t)) {
        EXPECT_LE(held[0].begin[0], b.begin[0]) << text << " tile " << t;
        EXPECT_GE(held[0].end[0], b.end[0]) << text << " tile " << t;
        if (layout->kind == fb::OwnershipKind::Blocked) {
          EXPECT_EQ(held[0].begin[0], b.begin[0]) << text << " tile " << t;
          EXPECT_EQ(held[0].end[0], b.end[0]) << text << " tile " << t;
        }
      }
    }
  }
  // Column blocks split by a row axis in the grid order are not one run:
  // no single replica axis holds them.
  std::optional<fb::OwnershipT> split =
      ParseOwnership("blocked(2x2, sub=1x2, order=1,0,3,2,4)");
  ASSERT_TRUE(split.has_value());
  EXPECT_FALSE(RowColumnOwnership(*split).has_value());
}

}  // namespace
}  // namespace tilec::passes
