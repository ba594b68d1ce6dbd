#include "passes/inspect/exchange_totals.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "passes/inspect/test_program.h"

namespace tilec::inspect {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Superstep 0: op 1 multicasts 2 pieces of 64 B (F16) from tile 0 to tiles
// 1 and 2 and sends 32 B from tile 3 to tile 1; op 2 sends 16 B (F32) from
// tile 1 to tile 0. Superstep 1 has no exchange.
TestProgram TwoOps() {
  TestProgram p;
  const uint32_t src0 = p.AddBuffer(0, 0, 128);
  const uint32_t dst1 = p.AddBuffer(1, 0, 128);
  const uint32_t dst2 = p.AddBuffer(2, 0, 128);
  const uint32_t src3 = p.AddBuffer(3, 0, 32);
  const uint32_t dst1b = p.AddBuffer(1, 256, 32);
  const uint32_t src1 = p.AddBuffer(1, 512, 16, fb::DType::F32);
  const uint32_t dst0 = p.AddBuffer(0, 512, 16, fb::DType::F32);
  p.AddStep("x");
  p.AddStep("quiet");
  p.AddTransfer(0, 0, src0, 64, 2, {{1, dst1}, {2, dst2}}, 1);
  p.AddTransfer(0, 3, src3, 32, 1, {{1, dst1b}}, 1);
  p.AddTransfer(0, 1, src1, 16, 1, {{0, dst0}}, 2);
  return p;
}

ExchangeTotals Totals(const TestProgram& p, int largest) {
  StatusOr<ExchangeTotals> x = ExchangesByStep(p.Completed(), largest);
  EXPECT_TRUE(x.ok()) << x.status().message();
  return x.ok() ? *x : ExchangeTotals();
}

TEST(ExchangeTotals, PerTileBytesAndFragmentsAsTheSimulatorCounts) {
  const ExchangeTotals x = Totals(TwoOps(), 5);
  ASSERT_EQ(x.steps.size(), 2u);
  const TileTraffic& t = x.steps[0].tiles;
  // A multicast is sent once and received by each destination; each piece
  // is a fragment at both ends.
  EXPECT_EQ(t.sent[0], 128);
  EXPECT_EQ(t.sent[1], 16);
  EXPECT_EQ(t.sent[3], 32);
  EXPECT_EQ(t.received[0], 16);
  EXPECT_EQ(t.received[1], 160);
  EXPECT_EQ(t.received[2], 128);
  EXPECT_EQ(t.fragments[0], 3);  // 2 pieces sent, 1 received
  EXPECT_EQ(t.fragments[1], 4);  // 2 + 1 received, 1 sent
  EXPECT_EQ(t.fragments[2], 2);
  EXPECT_EQ(t.fragments[3], 1);
  EXPECT_EQ(t.fragments[4], 0);
  EXPECT_EQ(x.steps[0].transfers, 3);
  EXPECT_EQ(x.steps[0].pieces, 4);
  EXPECT_EQ(x.steps[0].bytes_sent, 176);
  EXPECT_EQ(x.steps[0].bytes_received, 304);
  EXPECT_EQ(x.steps[0].fragments, 10);
  // The quiet superstep: zeros for every tile.
  EXPECT_EQ(x.steps[1].tiles.received.size(), 16u);
  EXPECT_EQ(x.steps[1].transfers, 0);
  EXPECT_TRUE(x.steps[1].ops.empty());
  EXPECT_EQ(x.program.received, t.received);
}

TEST(ExchangeTotals, PerOpTotalsInASuperstep) {
  const ExchangeTotals x = Totals(TwoOps(), 5);
  ASSERT_EQ(x.steps[0].ops.size(), 2u);
  const OpExchange& a = x.steps[0].ops[0];
  EXPECT_EQ(a.op, 1u);
  EXPECT_EQ(a.transfers, 2);
  EXPECT_EQ(a.pieces, 3);
  EXPECT_EQ(a.bytes_sent, 160);
  EXPECT_EQ(a.bytes_received, 288);  // 128 x 2 destinations + 32
  EXPECT_EQ(a.fragments, 8);         // 2 x (1 + 2) + 1 x (1 + 1)
  EXPECT_EQ(a.source_tiles, 2);
  EXPECT_EQ(a.destination_tiles, 2);
  EXPECT_THAT(a.dtypes, ElementsAre(fb::DType::F16));
  const OpExchange& b = x.steps[0].ops[1];
  EXPECT_EQ(b.op, 2u);
  EXPECT_EQ(b.bytes_received, 16);
  EXPECT_THAT(b.dtypes, ElementsAre(fb::DType::F32));
  // Over the whole program, per tile and op.
  EXPECT_EQ(x.received_by_op.at(1)[1], 160);
  EXPECT_EQ(x.received_by_op.at(1)[2], 128);
  EXPECT_EQ(x.received_by_op.at(1)[0], 0);
  EXPECT_EQ(x.received_by_op.at(2)[0], 16);
}

TEST(ExchangeTotals, LargestTransfersBySizeThenProgramOrder) {
  TestProgram p = TwoOps();
  const uint32_t src = p.AddBuffer(5, 0, 128);
  const uint32_t dst = p.AddBuffer(6, 0, 128);
  // As large as the multicast (2 x 64 B) but later: it ranks second.
  p.AddTransfer(0, 5, src, 128, 1, {{6, dst}}, 1);
  ExchangeTotals x = Totals(p, 2);
  const std::vector<TransferInfo>& top = x.steps[0].ops[0].largest;
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].index, 0);
  EXPECT_EQ(top[0].Bytes(), 128);
  EXPECT_EQ(top[0].rows, 2);
  EXPECT_THAT(top[0].destinations, ElementsAre(1, 2));
  EXPECT_EQ(top[1].index, 3);
  EXPECT_EQ(top[1].src_tile, 5);
  EXPECT_EQ(Totals(p, 0).steps[0].ops[0].largest.size(), 0u);
}

TEST(ExchangeTotals, TileOutsideTheTargetIsBadInput) {
  TestProgram p = TwoOps();
  p.module.program->supersteps[0]->exchange[2]->destinations[0]->tile = 16;
  StatusOr<ExchangeTotals> x = ExchangesByStep(p.Completed(), 5);
  ASSERT_FALSE(x.ok());
  EXPECT_EQ(x.status().code(), StatusCode::kBadInput);
  EXPECT_THAT(x.status().message(),
              HasSubstr("superstep 0 tile 1 op 2 transfer 2: destination 0 "
                        "tile 16 buffer #6: tile out of range (target has 16 "
                        "tiles)"));
}

}  // namespace
}  // namespace tilec::inspect
