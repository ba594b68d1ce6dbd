#include "kernels/exchange_schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "formats/ir.h"

namespace tilec::kernels {
namespace {

using ::testing::HasSubstr;

ExchangeModel Model(int tiles = 8) {
  fb::TargetT target;
  EXPECT_TRUE(ir::LoadTarget("tiny", &target).ok());
  target.tiles = tiles;
  return ExchangeModel::FromTarget(target);
}

// Two pieces into tile 2 (from 0 and 1), one multicast from 3 to 4 and 5.
PhaseTraffic Small(const ExchangeModel& model) {
  PhaseTraffic traffic(model);
  const int to2[] = {2};
  const int to45[] = {4, 5};
  traffic.AddPiece(0, to2, 40, 10, 0, 0);
  traffic.AddPiece(1, to2, 40, 10, 1, 0);
  traffic.AddPiece(3, to45, 16, 4, 2, 0);
  return traffic;
}

Status Verify(const PhaseTraffic& traffic, const fb::ExchangeScheduleT& s) {
  return VerifySchedule(traffic, s, "phase").status();
}

// Moves one instruction to `cycle`.
void SetCycle(fb::ControlInstruction* ins, uint32_t cycle) {
  *ins = fb::ControlInstruction(cycle, ins->packet(), ins->destination(),
                                ins->kind());
}

fb::ControlInstruction* Find(fb::ExchangeScheduleT& s, int tile,
                             fb::ControlKind kind, uint32_t packet) {
  for (auto& tc : s.tiles) {
    if (tc->tile != static_cast<uint32_t>(tile)) continue;
    for (auto& ins : tc->instructions) {
      if (ins.kind() == kind && ins.packet() == packet) return &ins;
    }
  }
  return nullptr;
}

TEST(ExchangeSchedule, EndpointTermIsTheLargestOfBytesAndFragments) {
  const ExchangeModel model = Model();
  // Largest of ceil(401/4)=101, 100/4=25, 2*3=6.
  EXPECT_EQ(EndpointTileCycles(model, 401, 100, 3), 101);
  EXPECT_EQ(EndpointTileCycles(model, 0, 100, 3), 25);
  EXPECT_EQ(EndpointTileCycles(model, 8, 4, 20), 40);
}

TEST(ExchangeSchedule, WordsSpannedCountsWholeWords) {
  EXPECT_EQ(WordsSpanned(0, 4), 1);
  EXPECT_EQ(WordsSpanned(0, 5), 2);
  EXPECT_EQ(WordsSpanned(2, 4), 2);  // a half word at each end
  EXPECT_EQ(WordsSpanned(3, 1), 1);
  EXPECT_EQ(WordsSpanned(8, 0), 0);
}

TEST(ExchangeSchedule, ScheduleIsValidAndTimesTheReceiver) {
  const ExchangeModel model = Model();
  const PhaseTraffic traffic = Small(model);
  const fb::ExchangeScheduleT s = SchedulePhase(traffic);
  StatusOr<int64_t> length = VerifySchedule(traffic, s, "phase");
  ASSERT_TRUE(length.ok()) << length.status().message();
  // Tile 2 takes its two 10-word pieces one after the other; the first
  // starts once its Send has issued (2 cycles), the last arrives 52 later.
  EXPECT_EQ(*length, 2 + 10 + 10 + model.RouteLatency(2));
  EXPECT_EQ(static_cast<int64_t>(s.length), *length);
  EXPECT_EQ(s.bound, 20u);  // 80 bytes into tile 2 at 4 B a cycle
  EXPECT_GE(*length, static_cast<int64_t>(s.bound));
}

// The scheduler keeps busy cycles in 32 bits: a route latency of 2^29
// cycles still schedules exactly (the Pointers land 2^29 after their
// packets' starts), and a schedule that would pass 2^31 - 1 cycles is
// refused rather than wrapped.
TEST(ExchangeSchedule, CyclesUpTo32BitsScheduleAndLongerPhasesAreRefused) {
  ExchangeModel model = Model();
  model.latency = 1 << 29;
  const PhaseTraffic traffic = Small(model);
  const fb::ExchangeScheduleT s = SchedulePhase(traffic);
  StatusOr<int64_t> length = VerifySchedule(traffic, s, "phase");
  ASSERT_TRUE(length.ok()) << length.status().message();
  EXPECT_EQ(*length, 2 + 10 + 10 + model.RouteLatency(2));

  model.latency = std::numeric_limits<int32_t>::max() - 8;
  const PhaseTraffic longer = Small(model);
  EXPECT_DEATH(SchedulePhase(longer), "schedules past 2\\^31 - 1 cycles");
}

// The schedule rebuilt from its starts is the schedule.
TEST(ExchangeSchedule, ScheduleFromItsStartsIsTheSchedule) {
  const ExchangeModel model = Model();
  const PhaseTraffic traffic = Small(model);
  const fb::ExchangeScheduleT s = SchedulePhase(traffic);
  EXPECT_EQ(SchedulePhaseStarts(traffic), s.starts);
  const fb::ExchangeScheduleT again = ScheduleFromStarts(traffic, s.starts);
  EXPECT_EQ(again.starts, s.starts);
  // The figures without the instructions: the latest instruction's tile
  // (the lowest of equals) read off the schedule.
  const ScheduleFigures figures = FiguresOfStarts(traffic, s.starts);
  EXPECT_EQ(figures.length, s.length);
  EXPECT_EQ(figures.bound, s.bound);
  int64_t last = -1;
  int last_tile = -1;
  for (const auto& tc : s.tiles) {
    for (const fb::ControlInstruction& ins : tc->instructions) {
      if (int64_t{ins.cycle()} > last) {
        last = ins.cycle();
        last_tile = static_cast<int>(tc->tile);
      }
    }
  }
  EXPECT_EQ(figures.last_tile, last_tile);
  EXPECT_EQ(again.length, s.length);
  EXPECT_EQ(again.bound, s.bound);
  ASSERT_EQ(again.tiles.size(), s.tiles.size());
  for (size_t t = 0; t < s.tiles.size(); ++t) {
    EXPECT_EQ(again.tiles[t]->tile, s.tiles[t]->tile);
    EXPECT_EQ(again.tiles[t]->instructions.size(),
              s.tiles[t]->instructions.size());
    for (size_t i = 0; i < s.tiles[t]->instructions.size(); ++i) {
      const fb::ControlInstruction& a = again.tiles[t]->instructions[i];
      const fb::ControlInstruction& b = s.tiles[t]->instructions[i];
      EXPECT_EQ(a.cycle(), b.cycle());
      EXPECT_EQ(a.packet(), b.packet());
      EXPECT_EQ(a.destination(), b.destination());
      EXPECT_EQ(a.kind(), b.kind());
    }
  }
}

// A caller holding a schedule of `beat` cycles asks for a shorter one: the
// scheduler's own where it is shorter (the same starts), else nothing.
TEST(ExchangeSchedule, ShorterThanGivesTheScheduleOnlyBelowTheBeat) {
  const ExchangeModel model = Model();
  const PhaseTraffic traffic = Small(model);
  const std::vector<uint32_t> starts = SchedulePhaseStarts(traffic);
  const int64_t length = FiguresOfStarts(traffic, starts).length;
  EXPECT_EQ(SchedulePhaseStartsShorterThan(traffic, length + 1), starts);
  EXPECT_EQ(SchedulePhaseStartsShorterThan(traffic, length), std::nullopt);
  EXPECT_EQ(SchedulePhaseStartsShorterThan(traffic, 1), std::nullopt);
}

TEST(ExchangeSchedule, TrafficsAreEqualPieceForPiece) {
  const ExchangeModel model = Model();
  EXPECT_EQ(Small(model), Small(model));
  PhaseTraffic more = Small(model);
  const int to6[] = {6};
  more.AddPiece(7, to6, 4, 1, 3, 0);
  EXPECT_FALSE(more == Small(model));
  PhaseTraffic other_op(model);
  const int to2[] = {2};
  const int to45[] = {4, 5};
  other_op.AddPiece(0, to2, 40, 10, 0, 0);
  other_op.AddPiece(1, to2, 40, 10, 1, 0);
  other_op.AddPiece(3, to45, 16, 4, 2, 0, /*op=*/1);
  EXPECT_FALSE(other_op == Small(model));
  EXPECT_FALSE(Small(Model(16)) == Small(model));
}

TEST(ExchangeSchedule, RouteLatencyGrowsByRow) {
  const ExchangeModel model = Model(1472);
  EXPECT_EQ(model.RouteLatency(0), 52);
  EXPECT_EQ(model.RouteLatency(63), 52);
  EXPECT_EQ(model.RouteLatency(64), 54);
  EXPECT_EQ(model.RouteLatency(1471), 52 + 2 * 22);
}

TEST(ExchangeSchedule, LongPiecesSplitIntoPackets) {
  ExchangeModel model = Model();
  model.max_packet_words = 4;
  PhaseTraffic traffic(model);
  const int to1[] = {1};
  traffic.AddPiece(0, to1, 40, 10, 0, 0);
  ASSERT_EQ(traffic.packets().size(), 3u);  // 4 + 4 + 2 words
  EXPECT_EQ(traffic.packets()[2].words, 2);
  fb::ExchangeScheduleT s = SchedulePhase(traffic);
  EXPECT_TRUE(Verify(traffic, s).ok());
  s.starts.pop_back();
  EXPECT_THAT(Verify(traffic, s).message(),
              HasSubstr("the schedule starts 2 packets, the transfers make 3"));
}

TEST(ExchangeSchedule, RefusesOverlappingSendsOnOneLane) {
  const ExchangeModel model = Model();
  PhaseTraffic traffic(model);
  const int to1[] = {1};
  const int to2[] = {2};
  traffic.AddPiece(0, to1, 40, 10, 0, 0);
  traffic.AddPiece(0, to2, 40, 10, 1, 0);
  fb::ExchangeScheduleT s = SchedulePhase(traffic);
  ASSERT_TRUE(Verify(traffic, s).ok());
  // Both sends at the first one's cycle.
  const uint32_t first = std::min(s.starts[0], s.starts[1]);
  for (uint32_t p = 0; p < 2; ++p) {
    s.starts[p] = first;
    for (auto& tc : s.tiles) {
      for (auto& ins : tc->instructions) {
        if (ins.packet() != p) continue;
        const int64_t shift = ins.kind() == fb::ControlKind::Pointer
                                  ? model.RouteLatency(tc->tile)
                                  : 0;
        ins = fb::ControlInstruction(first + shift, p, ins.destination(),
                                     ins.kind());
      }
    }
  }
  // The sender now issues two Sends in the same cycles: that rule fires
  // first; with one Send moved back a cycle the lane rule does.
  EXPECT_THAT(Verify(traffic, s).message(),
              HasSubstr("control instructions issue one at a time"));
}

TEST(ExchangeSchedule, RefusesOverlappingReceiveWindows) {
  const ExchangeModel model = Model();
  const PhaseTraffic traffic = Small(model);
  fb::ExchangeScheduleT s = SchedulePhase(traffic);
  // Move packet 1 (tile 1 -> 2) to start 5 cycles after packet 0.
  const uint32_t start = s.starts[0] + 5;
  s.starts[1] = start;
  SetCycle(Find(s, 1, fb::ControlKind::Send, 1), start);
  // Tile 2's instructions must stay in issue order: rebuild its program.
  for (auto& tc : s.tiles) {
    if (tc->tile != 2) continue;
    tc->instructions.clear();
    for (uint32_t p : {0u, 1u}) {
      tc->instructions.emplace_back(s.starts[p], p, 0, fb::ControlKind::Select);
      tc->instructions.emplace_back(s.starts[p] + model.RouteLatency(2), p, 0,
                                    fb::ControlKind::Pointer);
    }
    std::sort(tc->instructions.begin(), tc->instructions.end(),
              [](const auto& a, const auto& b) { return a.cycle() < b.cycle(); });
  }
  s.length = s.starts[1] + 10 + model.RouteLatency(2);
  EXPECT_THAT(Verify(traffic, s).message(),
              HasSubstr("tile 2: one source at a time: receive windows "
                        "overlap: transfer 1 piece 0"));
}

TEST(ExchangeSchedule, RefusesAMulticastReceiverListeningLate) {
  const ExchangeModel model = Model();
  const PhaseTraffic traffic = Small(model);
  fb::ExchangeScheduleT s = SchedulePhase(traffic);
  fb::ControlInstruction* select = Find(s, 5, fb::ControlKind::Select, 2);
  ASSERT_NE(select, nullptr);
  SetCycle(select, select->cycle() + 1);
  EXPECT_THAT(Verify(traffic, s).message(),
              HasSubstr("every receiver of a multicast selects its source as "
                        "the packet starts"));
}

TEST(ExchangeSchedule, RefusesAPointerIgnoringRouteLatency) {
  const ExchangeModel model = Model();
  const PhaseTraffic traffic = Small(model);
  fb::ExchangeScheduleT s = SchedulePhase(traffic);
  fb::ControlInstruction* pointer = Find(s, 4, fb::ControlKind::Pointer, 2);
  ASSERT_NE(pointer, nullptr);
  SetCycle(pointer, s.starts[2] + 1);  // as if the payload came at once
  EXPECT_THAT(Verify(traffic, s).message(),
              HasSubstr("the pointer is set as the first word arrives (route "
                        "latency 52)"));
}

TEST(ExchangeSchedule, RefusesInstructionsIssuedTogether) {
  const ExchangeModel model = Model();
  PhaseTraffic traffic(model);
  const int to1[] = {1};
  const int to0[] = {0};
  traffic.AddPiece(0, to1, 8, 2, 0, 0);
  traffic.AddPiece(2, to0, 8, 2, 1, 0);
  fb::ExchangeScheduleT s = SchedulePhase(traffic);
  ASSERT_TRUE(Verify(traffic, s).ok());
  // Tile 0 sends packet 0 and selects packet 1's source: put both at one
  // cycle.
  s.starts[1] = s.starts[0];
  SetCycle(Find(s, 2, fb::ControlKind::Send, 1), s.starts[0]);
  for (auto& tc : s.tiles) {
    if (tc->tile != 0) continue;
    tc->instructions.clear();
    tc->instructions.emplace_back(s.starts[0], 0, 0, fb::ControlKind::Send);
    tc->instructions.emplace_back(s.starts[0], 1, 0, fb::ControlKind::Select);
    tc->instructions.emplace_back(s.starts[0] + model.RouteLatency(0), 1, 0,
                                  fb::ControlKind::Pointer);
  }
  EXPECT_THAT(Verify(traffic, s).message(),
              HasSubstr("tile 0: Select of transfer 1 piece 0 at cycle 2: "
                        "control instructions issue one at a time"));
}

TEST(ExchangeSchedule, RefusesMissingAndDuplicateInstructionsAndPairedLanes) {
  const ExchangeModel model = Model();
  const PhaseTraffic traffic = Small(model);
  const fb::ExchangeScheduleT good = SchedulePhase(traffic);
  fb::ExchangeScheduleT s = good;
  for (auto& tc : s.tiles) {
    if (tc->tile == 3) tc->instructions.clear();
  }
  EXPECT_THAT(Verify(traffic, s).message(),
              HasSubstr("transfer 2 piece 0: no Send"));
  s = good;
  s.lanes.assign(traffic.packets().size(), fb::ExchangeLane::Ordinary);
  EXPECT_TRUE(Verify(traffic, s).ok());
  s.lanes[1] = fb::ExchangeLane::Paired;
  EXPECT_THAT(Verify(traffic, s).message(),
              HasSubstr("paired (64-bit) sends are not supported"));
  s = good;
  s.length += 1;
  EXPECT_THAT(Verify(traffic, s).message(), HasSubstr("the schedule claims"));
}

// Random phases of each kind: every schedule is valid, never shorter than
// the endpoint bound, and the same every time.
TEST(ExchangeSchedule, RandomPhasesScheduleValidAboveTheBound) {
  std::mt19937_64 rng(7);
  const ExchangeModel model = Model(64);
  for (int kind = 0; kind < 4; ++kind) {
    for (int trial = 0; trial < 25; ++trial) {
      PhaseTraffic traffic(model);
      const int pieces = 1 + static_cast<int>(rng() % 200);
      for (int p = 0; p < pieces; ++p) {
        const int sender = static_cast<int>(rng() % 64);
        int fan = 1;
        if (kind == 1) fan = 1 + static_cast<int>(rng() % 20);   // multicast
        if (kind == 2) fan = 1 + static_cast<int>(rng() % 4);    // mixed
        std::vector<int> receivers;
        for (int r = 0; r < 64 && static_cast<int>(receivers.size()) < fan;
             ++r) {
          const int tile = static_cast<int>((sender + 1 + rng() % 63) % 64);
          if (std::find(receivers.begin(), receivers.end(), tile) ==
              receivers.end()) {
            receivers.push_back(tile);
          }
        }
        // Fragmented phases move a word or two per piece.
        const int64_t bytes =
            kind == 3 ? 2 + 2 * static_cast<int64_t>(rng() % 4)
                      : 4 + 2 * static_cast<int64_t>(rng() % 3000);
        const int64_t address = 2 * static_cast<int64_t>(rng() % 2);
        // Three ops: their packets also schedule one op after another.
        traffic.AddPiece(sender, receivers, bytes,
                         WordsSpanned(address, bytes), p, 0, p % 3);
      }
      const fb::ExchangeScheduleT s = SchedulePhase(traffic);
      StatusOr<int64_t> length = VerifySchedule(traffic, s, "random");
      ASSERT_TRUE(length.ok()) << length.status().message();
      EXPECT_GE(*length, traffic.EndpointBound());
      const fb::ExchangeScheduleT again = SchedulePhase(traffic);
      EXPECT_EQ(again.starts, s.starts);
      EXPECT_EQ(again.length, s.length);
    }
  }
}

// Weights from their homes for four GEMMs in one phase, as emit-device
// merges them: each op's senders multicast one piece each to receivers at
// the op's own strides. `tell_ops` false gives the same packets with no op
// told apart.
PhaseTraffic HomeDeliveries(const ExchangeModel& model, uint64_t seed,
                            bool tell_ops) {
  std::mt19937_64 rng(seed);
  PhaseTraffic traffic(model);
  const int tiles = model.tiles;
  uint32_t transfer = 0;
  for (uint32_t op = 0; op < 4; ++op) {
    const int fan = 1 + static_cast<int>(rng() % 8);
    std::vector<int> strides;
    for (int k = 0; k < fan; ++k) {
      strides.push_back(1 + static_cast<int>(rng() % (tiles - 1)));
    }
    std::sort(strides.begin(), strides.end());
    strides.erase(std::unique(strides.begin(), strides.end()), strides.end());
    const int64_t words = 4 + static_cast<int64_t>(rng() % 60);
    const int step = 1 + static_cast<int>(rng() % 4);  // every step-th tile
    for (int sender = 0; sender < tiles; sender += step) {
      std::vector<int> receivers;
      for (int s : strides) receivers.push_back((sender + s) % tiles);
      traffic.AddPiece(sender, receivers, 4 * words, words, transfer++, 0,
                       tell_ops ? op : 0);
    }
  }
  return traffic;
}

// Placing one op's packets after another's (ops-in-turn) is one more order
// the scheduler tries: never longer than without it, and shorter on many
// merged phases, where the phase-wide priority ties every packet on the
// busiest receiver and interleaves the ops' patterns.
TEST(ExchangeSchedule, MergedOpsScheduleOneAfterAnother) {
  const ExchangeModel model = Model(48);
  int shorter = 0;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    const PhaseTraffic merged = HomeDeliveries(model, seed, true);
    const fb::ExchangeScheduleT s = SchedulePhase(merged);
    ASSERT_TRUE(Verify(merged, s).ok()) << Verify(merged, s).message();
    const fb::ExchangeScheduleT blind =
        SchedulePhase(HomeDeliveries(model, seed, false));
    EXPECT_LE(s.length, blind.length) << "seed " << seed;
    shorter += s.length < blind.length;
  }
  EXPECT_GE(shorter, 10);  // 12 of the 50
}

// `rounds` random permutations of the receiver groups (of `group_size`
// consecutive tiles), each tile sending a piece of `words` or one more
// words (seeded) to the image of its group under each, to every tile of
// it but itself: with groups of one, the small unicasts an attention's
// scores make, every tile sending and receiving alike; with groups of
// five, the long multicasts of a softmax's probabilities.
PhaseTraffic Permutations(const ExchangeModel& model, int rounds,
                          int group_size, int64_t words, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int groups = model.tiles / group_size;
  std::vector<std::vector<int>> images(rounds, std::vector<int>(groups));
  for (std::vector<int>& image : images) {
    std::iota(image.begin(), image.end(), 0);
    std::shuffle(image.begin(), image.end(), rng);
  }
  // Sender by sender, as emit-device lists a phase's transfers.
  PhaseTraffic traffic(model);
  uint32_t transfer = 0;
  for (int sender = 0; sender < groups * group_size; ++sender) {
    for (const std::vector<int>& image : images) {
      const int g = image[sender / group_size];
      std::vector<int> receivers;
      for (int tile = g * group_size; tile < (g + 1) * group_size; ++tile) {
        if (tile != sender) receivers.push_back(tile);
      }
      if (receivers.empty()) continue;
      const int64_t w = words + static_cast<int64_t>(rng() % 2);
      traffic.AddPiece(sender, receivers, 4 * w, w, transfer++, 0);
    }
  }
  return traffic;
}

// Rounds in which no tile sends or receives twice (an edge colouring of
// senders to receiver groups) keep such phases near their bound, where
// the other orders leave receivers idle between packets their senders
// could not start: 117 to 123 cycles above it with groups of one (193 to
// 221 without the order), 71 to 80 with groups of five (409 to 603).
TEST(ExchangeSchedule, PermutationPhasesScheduleInMatchings) {
  for (int group_size : {1, 5}) {
    for (uint64_t seed = 0; seed < 4; ++seed) {
      const ExchangeModel model = Model(60);
      const PhaseTraffic traffic =
          group_size == 1 ? Permutations(model, 30, 1, 15, seed)
                          : Permutations(model, 8, 5, 180, seed);
      const fb::ExchangeScheduleT s = SchedulePhase(traffic);
      ASSERT_TRUE(Verify(traffic, s).ok()) << Verify(traffic, s).message();
      EXPECT_LE(s.length, s.bound + 125)
          << "groups of " << group_size << ", seed " << seed;
    }
  }
}

// Wide multicasts to receiver sets that several packets share are placed
// by searching their lanes' unions: the same starts as searching each
// receiver's lanes, amid unicasts and narrower multicasts to the same tiles.
TEST(ExchangeSchedule, WideReceiverSetsScheduleAsEachReceiverWould) {
  std::mt19937_64 rng(9);
  const ExchangeModel model = Model(256);  // four rows of route latency
  for (int trial = 0; trial < 12; ++trial) {
    PhaseTraffic traffic(model);
    // Two wide sets that packets share: tiles [0, 150) (aligned ranges)
    // and the even tiles of [40, 250) (a union of its own); and tiles
    // [0, 200) but the sender, a set of each sender's own.
    std::vector<int> wide_a, wide_b;
    for (int t = 0; t < 150; ++t) wide_a.push_back(t);
    for (int t = 40; t < 250; t += 2) wide_b.push_back(t);
    uint32_t transfer = 0;
    const int pieces = 20 + static_cast<int>(rng() % 60);
    for (int p = 0; p < pieces; ++p) {
      // Odd trials move a word or a few: issue slots bind, not lanes.
      const int64_t bytes =
          4 + 4 * static_cast<int64_t>(rng() % (trial % 2 ? 3 : 64));
      const int kind = static_cast<int>(rng() % 5);
      std::vector<int> receivers;
      int sender = 0;
      if (kind == 0) {
        sender = 150 + static_cast<int>(rng() % 106);
        receivers = wide_a;
      } else if (kind == 1) {
        sender = 41 + 2 * static_cast<int>(rng() % 100);  // odd: not in b
        receivers = wide_b;
      } else if (kind == 4) {
        sender = static_cast<int>(rng() % 200);
        for (int t = 0; t < 200; ++t) {
          if (t != sender) receivers.push_back(t);
        }
      } else {
        sender = static_cast<int>(rng() % 256);
        const int fan = kind == 2 ? 1 : 2 + static_cast<int>(rng() % 30);
        while (static_cast<int>(receivers.size()) < fan) {
          const int tile = static_cast<int>(rng() % 256);
          if (tile != sender && std::find(receivers.begin(), receivers.end(),
                                          tile) == receivers.end()) {
            receivers.push_back(tile);
          }
        }
      }
      traffic.AddPiece(sender, receivers, bytes, WordsSpanned(0, bytes),
                       transfer++, 0);
    }
    const fb::ExchangeScheduleT grouped = SchedulePhase(traffic);
    const fb::ExchangeScheduleT each = SchedulePhase(traffic, false);
    StatusOr<int64_t> length = VerifySchedule(traffic, grouped, "grouped");
    ASSERT_TRUE(length.ok()) << length.status().message();
    EXPECT_EQ(grouped.starts, each.starts) << "trial " << trial;
    EXPECT_EQ(grouped.length, each.length) << "trial " << trial;
  }
}

// ---------------------------------------------------------------- fixed
// schedules. Phases of every shape the scheduler meets (unicasts,
// multicasts, fragments of a word or two that leave hundreds of busy
// intervals on a lane, wide receiver sets searched through unions, merged
// ops, tiles named twice, pieces without receivers, permutations,
// few senders broadcasting long split pieces), each pinned to the
// fingerprint of the schedule the scheduler made when it was written: a
// change to how it searches or keeps busy time must leave every schedule
// as it was.

// The model without a target file, so that target edits leave these
// schedules alone.
ExchangeModel FixedModel(int tiles, int fragment_cycles, int tiles_per_row,
                         int64_t max_packet_words) {
  ExchangeModel model;
  model.tiles = tiles;
  model.bytes_per_cycle = 4;
  model.fragment_cycles = fragment_cycles;
  model.latency = 52;
  model.latency_per_row = 2;
  model.tiles_per_row = tiles_per_row;
  model.max_packet_words = max_packet_words;
  return model;
}

// `fan` distinct tiles of [0, tiles) but `sender`, seeded.
std::vector<int> Receivers(std::mt19937_64& rng, int tiles, int sender,
                           int fan) {
  std::vector<int> receivers;
  while (static_cast<int>(receivers.size()) < fan) {
    const int tile = static_cast<int>(rng() % tiles);
    if (tile != sender && std::find(receivers.begin(), receivers.end(),
                                    tile) == receivers.end()) {
      receivers.push_back(tile);
    }
  }
  return receivers;
}

// Phase `seed` of the fixed set: its shape is seed % 8.
PhaseTraffic VariedPhase(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto below = [&](uint64_t n) { return static_cast<int>(rng() % n); };
  switch (seed % 8) {
    case 0: {  // unicasts of up to 3,000 bytes at odd addresses
      PhaseTraffic traffic(FixedModel(64, 2, 16, 4148));
      for (int p = 0, n = 50 + below(350); p < n; ++p) {
        const int sender = below(64);
        const int64_t bytes = 1 + below(3000);
        const int64_t words = WordsSpanned(below(4), bytes);
        traffic.AddPiece(sender, Receivers(rng, 64, sender, 1), bytes, words,
                         p, 0);
      }
      return traffic;
    }
    case 1: {  // multicasts to up to 20 tiles, split in 64-word packets
      PhaseTraffic traffic(FixedModel(64, 2, 16, 64));
      for (int p = 0, n = 50 + below(250); p < n; ++p) {
        const int sender = below(64);
        const int64_t words = 1 + below(400);
        traffic.AddPiece(sender, Receivers(rng, 64, sender, 1 + below(20)),
                         4 * words, words, p, 0);
      }
      return traffic;
    }
    case 2: {  // fragments: issue slots bind, lanes hold hundreds each
      PhaseTraffic traffic(FixedModel(16, 2, 4, 4148));
      for (int p = 0, n = 1500 + below(1500); p < n; ++p) {
        const int sender = below(16);
        const int64_t bytes = 2 + 2 * below(4);
        const int64_t words = WordsSpanned(2 * below(2), bytes);
        traffic.AddPiece(sender, Receivers(rng, 16, sender, 1 + below(3)),
                         bytes, words, p, 0);
      }
      return traffic;
    }
    case 3: {  // wide sets, shared (unions) or a sender's own, amid others
      PhaseTraffic traffic(FixedModel(256, 2, 64, 4148));
      std::vector<int> ranged, even;
      for (int t = 0; t < 150; ++t) ranged.push_back(t);
      for (int t = 40; t < 250; t += 2) even.push_back(t);
      for (int p = 0, n = 30 + below(60); p < n; ++p) {
        const int64_t words = 1 + below(p % 2 ? 3 : 64);
        int sender = below(256);
        std::vector<int> receivers;
        switch (below(5)) {
          case 0:
            sender = 150 + below(106);
            receivers = ranged;
            break;
          case 1:
            sender = 41 + 2 * below(100);
            receivers = even;
            break;
          case 2:
            for (int t = 0; t < 200; ++t) {
              if (t != sender) receivers.push_back(t);
            }
            break;
          default:
            receivers = Receivers(rng, 256, sender, 1 + below(30));
        }
        traffic.AddPiece(sender, receivers, 4 * words, words, p, 0);
      }
      return traffic;
    }
    case 4: {  // several ops' deliveries merged into one phase
      PhaseTraffic traffic(FixedModel(48, 2, 16, 16));
      uint32_t transfer = 0;
      for (uint32_t op = 0, ops = 2 + below(4); op < ops; ++op) {
        const int fan = 1 + below(6);
        const int64_t words = 4 + below(60);
        const int step = 1 + below(4);
        for (int sender = 0; sender < 48; sender += step) {
          traffic.AddPiece(sender, Receivers(rng, 48, sender, fan), 4 * words,
                           words, transfer++, 0, op);
        }
      }
      return traffic;
    }
    case 5: {  // tiles named twice, pieces without receivers; odd issue widths
      PhaseTraffic traffic(FixedModel(32, 3, 8, 32));
      for (int p = 0, n = 40 + below(200); p < n; ++p) {
        const int sender = below(32);
        std::vector<int> receivers = Receivers(rng, 32, sender, below(6));
        if (!receivers.empty() && below(3) == 0) {
          receivers.push_back(receivers[below(receivers.size())]);
        }
        const int64_t bytes = 1 + below(600);
        traffic.AddPiece(sender, receivers, bytes, WordsSpanned(0, bytes), p,
                         0, p % 2);
      }
      return traffic;
    }
    case 6: {  // permutations of groups of one or five tiles
      const ExchangeModel model = FixedModel(60, 2, 16, 4148);
      return seed % 16 == 6 ? Permutations(model, 30, 1, 15, seed)
                            : Permutations(model, 8, 5, 180, seed);
    }
    default: {  // few senders broadcasting long pieces (threads, unions)
      PhaseTraffic traffic(FixedModel(512, 2, 64, 256));
      uint32_t transfer = 0;
      for (int sender = 0, senders = 2 + below(6); sender < senders;
           ++sender) {
        std::vector<int> receivers;
        for (int t = 0; t < 512; ++t) {
          if (t != sender) receivers.push_back(t);
        }
        for (int k = 0, n = 1 + below(4); k < n; ++k) {
          const int64_t words = 16 + below(700);
          traffic.AddPiece(sender, receivers, 4 * words, words, transfer++,
                           0);
        }
        const int64_t words = 1 + below(8);
        traffic.AddPiece(sender, Receivers(rng, 512, sender, 1 + below(8)),
                         4 * words, words, transfer++, 0);
      }
      return traffic;
    }
  }
}

// FNV-1a of a schedule's length, bound, starts and instructions.
uint64_t Fingerprint(const fb::ExchangeScheduleT& s) {
  uint64_t h = 14695981039346656037ull;
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h = (h ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ull;
    }
  };
  mix(s.length);
  mix(s.bound);
  for (uint32_t start : s.starts) mix(start);
  for (const auto& tc : s.tiles) {
    mix(tc->tile);
    for (const fb::ControlInstruction& ins : tc->instructions) {
      mix(ins.cycle());
      mix(ins.packet());
      mix(ins.destination());
      mix(static_cast<uint64_t>(ins.kind()));
    }
  }
  return h;
}

TEST(ExchangeSchedule, VariedPhasesKeepTheirSchedules) {
  struct Fixed {
    uint32_t length;
    uint64_t fingerprint;
  };
  const Fixed fixed[] = {
      {2997, 1911260870015325492ull},
      {6707, 175225336185381532ull},
      {1231, 1846203632884125721ull},
      {1209, 1658690744631761699ull},
      {600, 4592502117286702891ull},
      {2473, 7816656226107816895ull},
      {589, 5129897430108105824ull},
      {3765, 15824302751250079760ull},
      {4963, 7781235785503252177ull},
      {17934, 17965569909745894562ull},
      {1473, 4520087579093533569ull},
      {915, 8955009447865879894ull},
      {141, 1578438264386559825ull},
      {2934, 9492586130941350846ull},
      {7304, 9449957682113101990ull},
      {2206, 2892552829366089268ull},
      {1705, 11592981182104828142ull},
      {6717, 2336241135776169648ull},
      {996, 2709524838488072814ull},
      {1182, 7634864166927987108ull},
      {446, 9040414879153299223ull},
      {990, 7741915639488197746ull},
      {590, 8401984598522902062ull},
      {5836, 16631029327319559512ull},
      {4122, 13284886714295538047ull},
      {10272, 2789053971445685090ull},
      {1024, 17536142870113287245ull},
      {583, 4745157680959540440ull},
      {505, 11442757194609328600ull},
      {1820, 13688698000649098854ull},
      {7310, 8165583706391490949ull},
      {2507, 9715668511525194705ull},
      {5347, 9353860619716040300ull},
      {7627, 14322305455550401858ull},
      {963, 2841468018720745585ull},
      {1033, 2949323384065747064ull},
      {405, 182710122908618417ull},
      {1858, 14816524352889466362ull},
      {590, 10819446618404020845ull},
      {6831, 296867530729364157ull},
      {2815, 2234575057320031314ull},
      {22862, 8300503150372725564ull},
      {1295, 8630649958449886273ull},
      {728, 16641656550341107412ull},
      {585, 17025387651660104379ull},
      {809, 13291783420919251184ull},
      {7307, 6664256954006481381ull},
      {1952, 16357177042809337192ull},
  };
  for (uint64_t seed = 0; seed < std::size(fixed); ++seed) {
    const PhaseTraffic traffic = VariedPhase(seed);
    const fb::ExchangeScheduleT s = SchedulePhase(traffic);
    StatusOr<int64_t> length = VerifySchedule(traffic, s, "varied");
    ASSERT_TRUE(length.ok()) << "seed " << seed << ": "
                             << length.status().message();
    EXPECT_EQ(s.length, fixed[seed].length) << "seed " << seed;
    EXPECT_EQ(Fingerprint(s), fixed[seed].fingerprint) << "seed " << seed;
    if (traffic.packets().size() <= kExactPlanningPackets) {
      EXPECT_EQ(PlannedPhaseLength(traffic), *length) << "seed " << seed;
    }
  }
}

// Every tile's `words` words to every other tile (an all-gather, the
// planner's costliest kind of phase to schedule), but tile 0 sends
// `first_words` and not to tile `skip` (none if -1).
PhaseTraffic AllGather(int tiles, int64_t words, int64_t first_words,
                       int skip = -1) {
  PhaseTraffic traffic(Model(tiles));
  for (int sender = 0; sender < tiles; ++sender) {
    std::vector<int> to;
    for (int r = 0; r < tiles; ++r) {
      if (r != sender && !(sender == 0 && r == skip)) to.push_back(r);
    }
    const int64_t w = sender == 0 ? first_words : words;
    traffic.AddPiece(sender, to, 4 * w, w, sender, 0);
  }
  return traffic;
}

// Large phases' planned lengths are remembered by their digest: the same
// traffic gets the length it was planned with, and traffic differing in
// one packet's length or in which tile one packet skips gets its own.
TEST(ExchangeSchedule, PlannedLengthsAreRememberedByContent) {
  const PhaseTraffic base = AllGather(160, 1, 1);
  const PhaseTraffic longer = AllGather(160, 1, 400);
  const PhaseTraffic skip_last = AllGather(160, 1, 1, 159);
  const PhaseTraffic skip_other = AllGather(160, 1, 1, 158);
  int64_t work = 0;
  for (const auto& p : base.packets()) work += 1 + p.receiver_count;
  ASSERT_GE(work, kMemoPlanningWork);
  EXPECT_EQ(base.Digest(), AllGather(160, 1, 1).Digest());
  EXPECT_NE(base.Digest(), longer.Digest());
  EXPECT_NE(base.Digest(), skip_last.Digest());
  EXPECT_NE(skip_last.Digest(), skip_other.Digest());
  auto scheduled = [](const PhaseTraffic& t) {
    return static_cast<int64_t>(SchedulePhase(t).length);
  };
  const int64_t planned = PlannedPhaseLength(base);
  EXPECT_EQ(planned, scheduled(base));
  EXPECT_EQ(PlannedPhaseLength(AllGather(160, 1, 1)), planned);
  EXPECT_GT(scheduled(longer), planned);
  for (const PhaseTraffic* t : {&longer, &skip_last, &skip_other}) {
    EXPECT_EQ(PlannedPhaseLength(*t), scheduled(*t));
  }
}

TEST(ExchangeSchedule, CodeBytesFollowTheByteModel) {
  fb::TargetT target;
  ASSERT_TRUE(ir::LoadTarget("ipu21", &target).ok());
  const CodeModel code = CodeModel::FromTarget(target);
  const ExchangeModel model = Model();
  PhaseTraffic traffic(model);
  const int to12[] = {1, 2};
  traffic.AddPiece(0, to12, 400, 100, 0, 0);  // a long send (> 64 words)
  traffic.AddPiece(0, to12, 8, 2, 1, 0);
  std::vector<int64_t> bytes(8, 0);
  AddExchangeCodeBytes(code, traffic, &bytes);
  EXPECT_EQ(bytes[0], 32);  // phase 8 + sends 12 and 8, rounded up to 8
  EXPECT_EQ(bytes[1], 8 + 2 * (8 + 4));       // phase + two receives
  EXPECT_EQ(bytes[3], 0);
  EXPECT_EQ(AddressUpdateCycles(target, fb::AddressUpdate::BaseRegister, 40),
            13);
  EXPECT_EQ(AddressUpdateCycles(target, fb::AddressUpdate::Patch, 24),
            234 + 9 * 24);
}

}  // namespace
}  // namespace tilec::kernels
