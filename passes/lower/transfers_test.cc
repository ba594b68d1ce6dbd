// Transfer emission: grouping runs into strided runs, merging them into
// multicasts exactly where one-piece transfers would merge, joining
// neighbours, and the lowering's strided programs costing what their
// pieces cost.

#include "passes/lower/transfers.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "formats/ir.h"
#include "passes/lower/emit_device.h"
#include "passes/lower/expand_reduce.h"
#include "passes/lower/hand_plan.h"

namespace tilec::lower {
namespace {

// ---------------------------------------------------------------- GroupRuns

TEST(GroupRunsTest, RowsAtConstantPitchesBecomeOneStridedRun) {
  // Three rows of 4 elements, 10 apart at the source and 4 at the
  // destination (a column block gathered into a contiguous buffer).
  const std::vector<lower::Run> runs = {{2, 0, 4}, {12, 4, 4}, {22, 8, 4}};
  EXPECT_EQ(GroupRuns(runs, 2), (std::vector<StridedRun>{{4, 0, 8, 3, 20, 8}}));
}

TEST(GroupRunsTest, ALengthOrPitchChangeStartsANewRun) {
  const std::vector<lower::Run> runs = {
      {0, 0, 4},   {10, 4, 4},   // pitch 10 / 4
      {20, 8, 2},                // shorter
      {30, 10, 2}, {40, 12, 2},  // pitch 10 / 2
      {45, 14, 2},               // source pitch 5
  };
  EXPECT_EQ(GroupRuns(runs, 1), (std::vector<StridedRun>{
                                    {0, 0, 4, 2, 10, 4},
                                    {20, 8, 2, 3, 10, 2},
                                    {45, 14, 2, 1, 0, 0},
                                }));
}

TEST(GroupRunsTest, PiecesNeverOverlapOrGoBackwards) {
  // Runs from different segments: the second starts before the first ends
  // at the destination, the third goes backwards at the source.
  const std::vector<lower::Run> runs = {{0, 0, 4}, {8, 2, 4}, {4, 12, 4}};
  EXPECT_EQ(GroupRuns(runs, 1), (std::vector<StridedRun>{
                                    {0, 0, 4, 1, 0, 0},
                                    {8, 2, 4, 1, 0, 0},
                                    {4, 12, 4, 1, 0, 0},
                                }));
}

// ---------------------------------------------------------------- merging

// One line per (source piece, destination), sorted: what the exchange model
// and the simulator see, however pieces are grouped.
using PieceKey = std::tuple<int, int, int64_t, int64_t>;  // tile, buffer,
                                                          // offset, bytes
using Pieces = std::map<PieceKey, std::vector<std::tuple<int, int, int64_t>>>;

// Also checks the contract: every source piece in exactly one transfer.
Pieces Expand(const std::vector<VTransfer>& transfers) {
  Pieces out;
  std::map<PieceKey, int> owner;
  for (size_t t = 0; t < transfers.size(); ++t) {
    const VTransfer& x = transfers[t];
    for (int64_t i = 0; i < x.rows; ++i) {
      const PieceKey key{x.src_tile, x.src.buffer,
                         x.src.offset + i * x.src_pitch, x.src.bytes};
      auto [it, fresh] = owner.emplace(key, static_cast<int>(t));
      EXPECT_TRUE(fresh || it->second == static_cast<int>(t))
          << "piece at " << std::get<2>(key) << " in transfers " << it->second
          << " and " << t;
      for (const VDestination& d : x.destinations) {
        out[key].push_back({d.tile, d.buffer, d.offset + i * x.dst_pitch});
      }
    }
  }
  for (auto& [key, dsts] : out) std::sort(dsts.begin(), dsts.end());
  return out;
}

struct Move {
  int src_tile, src_buffer;
  StridedRun run;
  int dst_tile, dst_buffer;
};

// The lowering before strided transfers: one transfer per piece, merged by
// (source tile, buffer, offset, bytes).
Pieces OnePieceTransfers(const std::vector<Move>& moves) {
  Pieces out;
  for (const Move& m : moves) {
    for (int64_t i = 0; i < m.run.rows; ++i) {
      out[{m.src_tile, m.src_buffer, m.run.src + i * m.run.src_pitch,
           m.run.bytes}]
          .push_back(
              {m.dst_tile, m.dst_buffer, m.run.dst + i * m.run.dst_pitch});
    }
  }
  for (auto& [key, dsts] : out) std::sort(dsts.begin(), dsts.end());
  return out;
}

Phase Build(const std::vector<Move>& moves, TransferBuilder* builder) {
  Phase phase;
  phase.kind = Phase::Kind::kExchange;
  for (const Move& m : moves) {
    builder->Add(&phase, m.src_tile, m.src_buffer, m.run, m.dst_tile,
                 m.dst_buffer, fb::DType::F32, 7);
  }
  builder->Clear();
  return phase;
}

TEST(TransferBuilderTest, IdenticallyGroupedPiecesBecomeOneMulticast) {
  const StridedRun run{64, 0, 16, 5, 128, 16};
  const std::vector<Move> moves = {{0, 3, run, 1, 10}, {0, 3, run, 2, 11}};
  TransferBuilder b;
  Phase p = Build(moves, &b);
  ASSERT_EQ(p.transfers.size(), 1u);
  const VTransfer& t = p.transfers[0];
  EXPECT_EQ(t.rows, 5);
  EXPECT_EQ(t.src_pitch, 128);
  EXPECT_EQ(t.dst_pitch, 16);
  EXPECT_EQ(t.Bytes(), 80);
  ASSERT_EQ(t.destinations.size(), 2u);
  EXPECT_EQ(t.destinations[1].tile, 2);
  EXPECT_EQ(Expand(p.transfers), OnePieceTransfers(moves));
  EXPECT_EQ(b.split_transfers(), 0);
}

// A unicast phase (a Redistribute the planner sends as unicasts) keeps
// each destination's pieces in a transfer of their own.
TEST(TransferBuilderTest, AUnicastPhaseNeverMergesDestinations) {
  const StridedRun run{64, 0, 16, 5, 128, 16};
  const std::vector<Move> moves = {{0, 3, run, 1, 10}, {0, 3, run, 2, 11}};
  TransferBuilder b;
  Phase p;
  p.kind = Phase::Kind::kExchange;
  p.unicast = true;
  for (const Move& m : moves) {
    b.Add(&p, m.src_tile, m.src_buffer, m.run, m.dst_tile, m.dst_buffer,
          fb::DType::F32, 7);
  }
  ASSERT_EQ(p.transfers.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_EQ(p.transfers[i].destinations.size(), 1u);
    EXPECT_EQ(p.transfers[i].destinations[0].tile, moves[i].dst_tile);
    EXPECT_EQ(p.transfers[i].destinations[0].buffer, moves[i].dst_buffer);
    EXPECT_EQ(p.transfers[i].destinations[0].offset, 0);
    EXPECT_EQ(p.transfers[i].src.offset, 64);
    EXPECT_EQ(p.transfers[i].rows, 5);
    EXPECT_EQ(p.transfers[i].src_pitch, 128);
    EXPECT_EQ(p.transfers[i].dst_pitch, 16);
  }
}

TEST(TransferBuilderTest, OtherDestinationPitchesMergePieceByPiece) {
  // The same 4 source rows into a contiguous buffer on tile 1 and into a
  // wider one on tile 2: one-piece transfers would have been 4 multicasts.
  const std::vector<Move> moves = {{0, 3, {0, 0, 16, 4, 64, 16}, 1, 10},
                                   {0, 3, {0, 0, 16, 4, 64, 32}, 2, 11}};
  TransferBuilder b;
  Phase p = Build(moves, &b);
  ASSERT_EQ(p.transfers.size(), 4u);
  for (const VTransfer& t : p.transfers) EXPECT_EQ(t.destinations.size(), 2u);
  EXPECT_EQ(Expand(p.transfers), OnePieceTransfers(moves));
  EXPECT_EQ(b.split_transfers(), 1);
  // Joining neighbours cannot undo it: the destinations' pitches differ.
  CompactTransfers(&p.transfers);
  EXPECT_EQ(p.transfers.size(), 4u);
}

TEST(TransferBuilderTest, OverlappingRowRangesMergeWhereTheyOverlap) {
  // Rows 0-5 to tile 1; rows 3-8 of the same column to tile 2.
  const std::vector<Move> moves = {{0, 3, {0, 0, 8, 6, 32, 8}, 1, 10},
                                   {0, 3, {96, 0, 8, 6, 32, 8}, 2, 11}};
  TransferBuilder b;
  Phase p = Build(moves, &b);
  EXPECT_EQ(Expand(p.transfers), OnePieceTransfers(moves));
  // After joining: rows 0-2 to tile 1, rows 3-5 to both, rows 6-8 to tile 2.
  CompactTransfers(&p.transfers);
  EXPECT_EQ(Expand(p.transfers), OnePieceTransfers(moves));
  ASSERT_EQ(p.transfers.size(), 3u);
  int64_t rows = 0;
  for (const VTransfer& t : p.transfers) rows += t.rows;
  EXPECT_EQ(rows, 9);
}

TEST(TransferBuilderTest, ASinglePieceInsideAStridedTransfer) {
  const std::vector<Move> moves = {{0, 3, {0, 0, 8, 6, 32, 8}, 1, 10},
                                   {0, 3, {64, 40, 8, 1, 0, 0}, 2, 11},
                                   {0, 3, {64, 80, 8, 1, 0, 0}, 3, 12}};
  TransferBuilder b;
  Phase p = Build(moves, &b);
  EXPECT_EQ(Expand(p.transfers), OnePieceTransfers(moves));
  CompactTransfers(&p.transfers);
  EXPECT_EQ(Expand(p.transfers), OnePieceTransfers(moves));
}

TEST(TransferBuilderTest, PhasesSourcesAndPieceSizesAreSeparate) {
  TransferBuilder b;
  Phase p1, p2;
  const StridedRun run{0, 0, 8, 4, 32, 8};
  b.Add(&p1, 0, 3, run, 1, 10, fb::DType::F32, 7);
  b.Add(&p2, 0, 3, run, 2, 11, fb::DType::F32, 7);  // other phase
  b.Add(&p1, 0, 4, run, 2, 11, fb::DType::F32, 7);  // other buffer
  b.Add(&p1, 0, 3, {0, 0, 4, 4, 32, 4}, 2, 12, fb::DType::F32, 7);  // bytes
  EXPECT_EQ(p1.transfers.size(), 3u);
  EXPECT_EQ(p2.transfers.size(), 1u);
  EXPECT_EQ(b.split_transfers(), 0);
}

// Random moves over a small source so that runs overlap in every way (same
// pieces grouped alike or not, other destination pitches, single pieces
// inside strided runs, different source pitches through shared pieces):
// the transfers must hold exactly the one-piece transfers' pieces and
// destinations, before and after joining neighbours.
TEST(TransferBuilderTest, RandomMovesMergeExactlyLikeOnePieceTransfers) {
  std::mt19937 rng(12345);
  auto pick = [&](std::vector<int64_t> v) {
    return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)];
  };
  int64_t splits = 0, strided = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<Move> moves;
    const int n = std::uniform_int_distribution<int>(1, 12)(rng);
    for (int i = 0; i < n; ++i) {
      Move m;
      m.src_tile = static_cast<int>(pick({0, 0, 0, 1}));
      m.src_buffer = static_cast<int>(pick({3, 3, 4}));
      m.run.bytes = pick({8, 8, 16});
      m.run.rows = pick({1, 2, 3, 4, 6});
      m.run.src = 8 * pick({0, 1, 2, 4, 6, 8, 12});
      m.run.src_pitch = m.run.rows > 1 ? pick({16, 32, 48}) : 0;
      m.run.dst = 8 * pick({0, 1, 4, 10});
      m.run.dst_pitch = m.run.rows > 1 ? pick({16, 24, 32}) : 0;
      m.dst_tile = static_cast<int>(pick({2, 3, 4}));
      m.dst_buffer = 10 + m.dst_tile;
      moves.push_back(m);
    }
    TransferBuilder b;
    Phase p = Build(moves, &b);
    const Pieces expected = OnePieceTransfers(moves);
    ASSERT_EQ(Expand(p.transfers), expected) << "trial " << trial;
    CompactTransfers(&p.transfers);
    ASSERT_EQ(Expand(p.transfers), expected) << "trial " << trial;
    splits += b.split_transfers();
    for (const VTransfer& t : p.transfers) strided += t.rows > 1;
  }
  // Both paths ran often.
  EXPECT_GT(splits, 100);
  EXPECT_GT(strided, 1000);
}

// ---------------------------------------------------------------- joining

VTransfer T(int src_tile, int64_t offset, int64_t bytes, int64_t rows,
            int64_t src_pitch, int64_t dst_pitch,
            std::vector<VDestination> dsts, uint32_t op = 7) {
  VTransfer t;
  t.src_tile = src_tile;
  t.src = {3, offset, bytes};
  t.destinations = std::move(dsts);
  t.op = op;
  t.rows = rows;
  t.src_pitch = src_pitch;
  t.dst_pitch = dst_pitch;
  return t;
}

TEST(CompactTransfersTest, NeighboursThatContinueTheStridesJoin) {
  std::vector<VTransfer> list = {
      T(0, 0, 8, 1, 0, 0, {{1, 10, 0}, {2, 11, 64}}),
      T(0, 32, 8, 2, 32, 8, {{1, 10, 8}, {2, 11, 72}}),
      T(0, 96, 8, 1, 0, 0, {{1, 10, 24}, {2, 11, 88}}),
      // Another destination tile: a new transfer.
      T(0, 128, 8, 1, 0, 0, {{1, 10, 32}, {3, 11, 96}}),
      T(0, 160, 8, 1, 0, 0, {{1, 10, 40}, {3, 11, 104}}),
      // Another op: kept apart.
      T(0, 192, 8, 1, 0, 0, {{1, 10, 48}, {3, 11, 112}}, 8),
  };
  const Pieces before = Expand(list);
  CompactTransfers(&list);
  EXPECT_EQ(Expand(list), before);
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].rows, 4);
  EXPECT_EQ(list[0].src_pitch, 32);
  EXPECT_EQ(list[0].dst_pitch, 8);
  EXPECT_EQ(list[1].rows, 2);
  EXPECT_EQ(list[2].rows, 1);
}

TEST(CompactTransfersTest, APitchChangeOrAnOverlapDoesNotJoin) {
  std::vector<VTransfer> list = {
      T(0, 0, 8, 2, 32, 8, {{1, 10, 0}}),
      T(0, 96, 8, 1, 0, 0, {{1, 10, 16}}),   // source pitch 64, not 32
      T(0, 100, 8, 1, 0, 0, {{1, 10, 24}}),  // 4 bytes on: would overlap
      T(1, 108, 8, 1, 0, 0, {{2, 10, 32}}),  // another source tile
  };
  CompactTransfers(&list);
  EXPECT_EQ(list.size(), 4u);
}

// ---------------------------------------------------------------- programs

// Rewrites every strided transfer of `module`'s program as its pieces: the
// one-transfer-per-run program the lowering wrote before strided transfers.
void ExpandProgram(fb::ModuleT* module) {
  for (auto& step : module->program->supersteps) {
    std::vector<std::unique_ptr<fb::TransferT>> pieces;
    for (auto& t : step->exchange) {
      for (uint32_t i = 0; i < t->rows; ++i) {
        auto p = std::make_unique<fb::TransferT>(*t);
        p->src_offset += i * t->src_pitch;
        for (auto& d : p->destinations) d->offset += i * t->dst_pitch;
        p->rows = 1;
        p->src_pitch = p->dst_pitch = 0;
        pieces.push_back(std::move(p));
      }
    }
    step->exchange = std::move(pieces);
  }
}

TEST(StridedProgramTest, MlpBlockCostsExactlyWhatItsPiecesCost) {
  // The MLP block on tiny with K splits (strided partial ranges) and
  // staged left operands.
  fb::ModuleT m = testing::Import("siglip-so400m-384", "mlp-block", "tiny", 12,
                                  32, 64, /*heads=*/1);
  testing::MlpPlan plan;
  plan.up = testing::GemmShape{3, 2, 2, 0, 1, fb::Staging::Streamed, 16};
  plan.down = testing::GemmShape{2, 3, 2, 2, 1, fb::Staging::Batched, 16, 2};
  testing::PlanMlpBlock(&m, plan);
  ASSERT_TRUE(ExpandReducePass().Run(&m).status().ok());
  EmitDevicePass emit;
  Status s = emit.Run(&m).status();
  const EmitSummary& summary = emit.summary();
  ASSERT_TRUE(s.ok()) << s.message();
  int64_t transfers = 0, pieces = 0;
  for (const auto& step : m.program->supersteps) {
    for (const auto& t : step->exchange) {
      ++transfers;
      pieces += t->rows;
    }
  }
  EXPECT_LT(transfers, pieces);  // some transfers are strided

  constexpr sim::Tolerance kDefault{2e-2, 1e-2, 0.9999};
  testing::SimCheck strided;
  ASSERT_TRUE(testing::SimulateAgainstReference(m, kDefault, &strided).ok());
  EXPECT_TRUE(strided.pass) << strided.message;
  EXPECT_EQ(strided.result.total_cycles, summary.predicted_cycles);
  EXPECT_EQ(strided.result.transfers, transfers);
  EXPECT_EQ(strided.result.pieces, pieces);

  ExpandProgram(&m);
  testing::SimCheck expanded;
  ASSERT_TRUE(testing::SimulateAgainstReference(m, kDefault, &expanded).ok());
  EXPECT_EQ(expanded.result.transfers, pieces);
  EXPECT_EQ(expanded.result.total_cycles, strided.result.total_cycles);
  EXPECT_EQ(expanded.result.exchange_cycles, strided.result.exchange_cycles);
  EXPECT_EQ(expanded.result.bytes_received, strided.result.bytes_received);
  EXPECT_EQ(expanded.result.outputs, strided.result.outputs);
  ASSERT_EQ(expanded.result.ops.size(), strided.result.ops.size());
  for (size_t i = 0; i < strided.result.ops.size(); ++i) {
    EXPECT_EQ(expanded.result.ops[i].exchange_cycles,
              strided.result.ops[i].exchange_cycles);
    EXPECT_EQ(expanded.result.ops[i].compute_cycles,
              strided.result.ops[i].compute_cycles);
  }
  ASSERT_EQ(expanded.result.supersteps.size(),
            strided.result.supersteps.size());
  for (size_t i = 0; i < strided.result.supersteps.size(); ++i) {
    EXPECT_EQ(expanded.result.supersteps[i].exchange_cycles,
              strided.result.supersteps[i].exchange_cycles);
    EXPECT_EQ(expanded.result.supersteps[i].exchange_slowest_tile,
              strided.result.supersteps[i].exchange_slowest_tile);
  }
}

// ---------------------------------------------------------------- merged

// The transfers of `a` then `b` on tiny, priced apart and merged.
struct Merged {
  fb::TargetT target;
  ExchangeCost a, b, both;
  std::optional<kernels::PhaseTraffic> traffic;

  Merged(const std::vector<VTransfer>& first,
         const std::vector<VTransfer>& second) {
    EXPECT_TRUE(ir::LoadTarget("tiny", &target).ok());
    StatusOr<kernels::CostModel> model = kernels::CostModel::Create(target);
    EXPECT_TRUE(model.ok());
    std::vector<const VTransfer*> pa, pb, all;
    for (const VTransfer& t : first) pa.push_back(&t);
    for (const VTransfer& t : second) pb.push_back(&t);
    all = pa;
    all.insert(all.end(), pb.begin(), pb.end());
    a = CostOfExchange(*model, pa);
    b = CostOfExchange(*model, pb);
    both = CostOfMergedExchange(*model, all, a.starts, a.scheduled, b.starts);
    traffic = TrafficOf(*model, all);
  }

  // The length of the merged traffic's schedule from `starts`, checked
  // against every rule (-1 if one is broken).
  int64_t VerifiedLength(const std::vector<uint32_t>& starts) const {
    StatusOr<int64_t> length = kernels::VerifySchedule(
        *traffic, kernels::ScheduleFromStarts(*traffic, starts), "merged");
    EXPECT_TRUE(length.ok()) << length.status().message();
    return length.ok() ? *length : -1;
  }
};

// Two phases back to back in one: the second's packets start where the
// first's schedule ends, a valid schedule as long as the two apart, and
// the merged price is never more than that.
TEST(CostOfMergedExchangeTest, BackToBackIsAScheduleOfTheMergedPhase) {
  // Tile 0 sends to 1 and 2, then tile 3 to 1 and tile 2 to 0: receivers
  // and lanes in both.
  const Merged m({T(0, 0, 256, 1, 0, 0, {{1, 3, 0}, {2, 3, 0}}, 1)},
                 {T(3, 0, 512, 1, 0, 0, {{1, 3, 256}}, 2),
                  T(2, 0, 128, 1, 0, 0, {{0, 3, 0}}, 2)});
  const std::vector<uint32_t> starts =
      BackToBackStarts(m.a.starts, m.a.scheduled, m.b.starts);
  ASSERT_EQ(starts.size(), 3u);
  EXPECT_EQ(starts[1], m.b.starts[0] + m.a.scheduled);
  EXPECT_EQ(m.VerifiedLength(starts), m.a.scheduled + m.b.scheduled);
  EXPECT_LE(m.both.cycles, m.a.cycles + m.b.cycles - m.target.sync_cycles);
}

// Where the parts can overlap, the scheduler's schedule of the merged
// traffic is kept, shorter than the parts back to back, and valid.
TEST(CostOfMergedExchangeTest, TheSchedulersWhereShorter) {
  // Tile 0 multicasts to 1-3 and tile 4 sends to 1, then tile 1 sends to
  // 0 and tile 5 to 2: disjoint lanes except receivers 1 and 2.
  const Merged m({T(0, 0, 256, 1, 0, 0, {{1, 3, 0}, {2, 3, 0}, {3, 3, 0}}, 1),
                  T(4, 0, 128, 1, 0, 0, {{1, 3, 256}}, 1)},
                 {T(1, 0, 512, 1, 0, 0, {{0, 3, 512}}, 2),
                  T(5, 0, 64, 1, 0, 0, {{2, 3, 512}}, 2)});
  EXPECT_LT(m.both.scheduled, m.a.scheduled + m.b.scheduled);
  EXPECT_EQ(m.VerifiedLength(m.both.starts), m.both.scheduled);
}

}  // namespace
}  // namespace tilec::lower
