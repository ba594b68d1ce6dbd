#include "passes/core/attention_plan.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <vector>

#include "formats/ir.h"

namespace tilec::passes {
namespace {

// Self-attention (Tq = Tk, staged qkv) and cross-attention (staged kv,
// Tq query rows of their own: the MAP head's 1).
struct Case {
  AttentionPart part;
  int64_t B, H, Tq, Tk, D;
  int m, n, first;
  bool cross = false;
  // Self-attention in image steps: the op's B images are images
  // [first_image, first_image + B) of qkv's staged_images (0: B).
  int64_t first_image = -1, staged_images = 0;

  std::vector<int64_t> Staged() const {
    return {(staged_images ? staged_images : B) * Tk, (cross ? 2 : 3) * H * D};
  }
  std::vector<int64_t> Probs() const { return {B, H, Tq, Tk}; }
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (AttentionPart part : {AttentionPart::kScores, AttentionPart::kContext}) {
    for (int m : {1, 3, 17}) {
      for (int n : {1, 2, 5}) {
        cases.push_back({part, 1, 4, 17, 17, 16, m, n, 0});
        cases.push_back({part, 2, 3, 9, 9, 8, std::min(m, 9), n, 7});
        cases.push_back({part, 1, 4, 1, 17, 16, 1, n, 0, true});
        cases.push_back({part, 2, 3, 3, 9, 8, std::min(m, 3), n, 7, true});
        cases.push_back({part, 2, 3, 9, 9, 8, std::min(m, 9), n, 7, false,
                         3, 6});
      }
    }
  }
  return cases;
}

AttentionGrid Grid(const Case& c) {
  StatusOr<AttentionGrid> g = MakeAttentionGrid(
      c.part, c.Staged(), c.Probs(), c.H, c.D, c.m, c.n, c.first,
      c.first_image);
  EXPECT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->cross, c.cross);
  return *g;
}

std::string Label(const Case& c) {
  return std::string(c.part == AttentionPart::kScores ? "scores" : "context") +
         (c.cross ? " cross" : "") + " B" + std::to_string(c.B) + " H" +
         std::to_string(c.H) + " Tq" + std::to_string(c.Tq) + " Tk" +
         std::to_string(c.Tk) + " m" + std::to_string(c.m) + " n" +
         std::to_string(c.n) + " from image " + std::to_string(c.first_image);
}

// Every result element is written by exactly one tile, and the result
// ownership gives each tile exactly the block it computes.
TEST(AttentionPlanTest, ResultBlocksCoverTheResultOnce) {
  for (const Case& c : Cases()) {
    const AttentionGrid g = Grid(c);
    const std::vector<int64_t> shape =
        c.part == AttentionPart::kScores
            ? c.Probs()
            : std::vector<int64_t>{c.B * c.Tq, c.H * c.D};
    const fb::OwnershipT own = g.ResultOwnership();
    ASSERT_EQ(ValidateOwnership(own, shape, 10000), "") << Label(c);
    int64_t covered = 0;
    g.ForEachTile([&](int64_t b, int64_t h, int mi, int ni, int t) {
      const Box box = g.ResultBox(b, h, mi, ni);
      covered += box.Elements();
      const std::vector<Box> held = HeldBoxes(own, shape, t);
      if (box.Empty()) {
        EXPECT_TRUE(held.empty()) << Label(c);
      } else {
        ASSERT_EQ(held.size(), 1u) << Label(c);
        EXPECT_EQ(held[0], box) << Label(c) << " tile " << t;
      }
    });
    int64_t all = 1;
    for (int64_t e : shape) all *= e;
    EXPECT_EQ(covered, all) << Label(c);
  }
}

// The needs over the qkv views hold exactly the boxes each tile multiplies,
// and the probabilities' need exactly its rows.
TEST(AttentionPlanTest, NeedsHoldWhatEachTileMultiplies) {
  for (const Case& c : Cases()) {
    const AttentionGrid g = Grid(c);
    const std::vector<int64_t> qkv = c.Staged();
    const std::vector<int64_t> probs = c.Probs();
    const std::vector<int64_t> q = {c.B * c.Tq, c.H * c.D};
    const std::vector<int> views = g.StagedViews();
    g.ForEachTile([&](int64_t b, int64_t h, int mi, int ni, int t) {
      const std::vector<Box> staged = g.StagedBoxes(b, h, mi, ni);
      ASSERT_EQ(staged.size(), views.size());
      for (size_t i = 0; i < views.size(); ++i) {
        const Box view = g.View(views[i]);
        const fb::OwnershipT need = g.StagedNeeded(views[i]);
        const std::vector<int64_t> extent = {view.end[0] - view.begin[0],
                                             view.end[1] - view.begin[1]};
        ASSERT_EQ(ValidateOwnership(need, extent, 10000), "") << Label(c);
        const std::vector<Box> held = HeldBoxes(need, qkv, t, &view);
        ASSERT_EQ(held.size(), staged[i].Empty() ? 0u : 1u) << Label(c);
        if (!held.empty()) {
          EXPECT_EQ(held[0], staged[i]) << Label(c);
        }
      }
      if (c.part == AttentionPart::kContext) {
        const std::vector<Box> held = HeldBoxes(g.ProbsNeeded(), probs, t);
        ASSERT_EQ(held.size(), 1u) << Label(c);
        EXPECT_EQ(held[0], g.ProbsBox(b, h, mi)) << Label(c);
      }
      if (c.part == AttentionPart::kScores && c.cross) {
        // The queries are an operand of their own, read where needed.
        const std::vector<Box> held = HeldBoxes(g.QueryNeeded(), q, t);
        ASSERT_EQ(held.size(), 1u) << Label(c);
        EXPECT_EQ(held[0], g.QueryBox(b, h, mi)) << Label(c);
      }
    });
  }
}

// The delivery brings every tile each staged element exactly once, from any
// owner of qkv.
TEST(AttentionPlanTest, DeliveryFillsEveryStagedBoxOnce) {
  for (const Case& c : Cases()) {
    const AttentionGrid g = Grid(c);
    const std::vector<int64_t> qkv = c.Staged();
    for (const fb::OwnershipT& owner :
         {BlockedOwnership({3, 2}), BlockedOwnership({1, 1}, 1, 5),
          FlatOwnership(4, 11)}) {
      const TransferPlan plan = AttentionDelivery(g, owner, qkv, 2);
      std::map<int, int64_t> received;
      for (const Transfer& tr : plan.transfers) {
        for (int d : tr.destination_tiles) received[d] += tr.box.Elements();
      }
      for (const LocalCopy& lc : plan.local_copies) {
        received[lc.tile] += lc.box.Elements();
      }
      g.ForEachTile([&](int64_t b, int64_t h, int mi, int ni, int t) {
        int64_t want = 0;
        for (const Box& s : g.StagedBoxes(b, h, mi, ni)) want += s.Elements();
        EXPECT_EQ(received[t], want) << Label(c) << " tile " << t;
      });
    }
  }
}

// An image step's tile reads of qkv exactly what the same position of the
// op over every image reads for image first_image + b.
TEST(AttentionPlanTest, ImageStepsReadTheirImagesOfQkv) {
  for (const Case& c : Cases()) {
    if (c.first_image < 0) continue;
    const AttentionGrid step = Grid(c);
    Case whole_case = c;
    whole_case.B = c.staged_images;
    whole_case.first_image = -1;
    whole_case.staged_images = 0;
    const AttentionGrid whole = Grid(whole_case);
    step.ForEachTile([&](int64_t b, int64_t h, int mi, int ni, int) {
      EXPECT_EQ(step.StagedBoxes(b, h, mi, ni),
                whole.StagedBoxes(c.first_image + b, h, mi, ni))
          << Label(c);
    });
  }
  // Images past qkv's, or a step of cross-attention, are refused.
  const std::vector<int64_t> qkv = {4 * 9, 3 * 3 * 8};
  const std::vector<int64_t> probs = {2, 3, 9, 9};
  for (int first_image : {0, 2}) {
    EXPECT_TRUE(MakeAttentionGrid(AttentionPart::kScores, qkv, probs, 3, 8, 1,
                                  1, 0, first_image)
                    .ok());
  }
  // Not in image steps, the op reads every image of qkv.
  EXPECT_FALSE(
      MakeAttentionGrid(AttentionPart::kScores, qkv, probs, 3, 8, 1, 1, 0)
          .ok());
  EXPECT_FALSE(MakeAttentionGrid(AttentionPart::kScores, qkv, probs, 3, 8, 1,
                                 1, 0, 3)
                   .ok());
  const std::vector<int64_t> kv = {2 * 9, 2 * 3 * 8};
  const std::vector<int64_t> probe = {2, 3, 1, 9};
  EXPECT_FALSE(
      MakeAttentionGrid(AttentionPart::kScores, kv, probe, 3, 8, 1, 1, 0, 1)
          .ok());
}

TEST(AttentionPlanTest, RefusesGridsThatDoNotFit) {
  const std::vector<int64_t> qkv = {17, 3 * 4 * 16};
  const std::vector<int64_t> probs = {1, 4, 17, 17};
  EXPECT_FALSE(
      MakeAttentionGrid(AttentionPart::kContext, qkv, probs, 4, 16, 1, 17, 0)
          .ok());
  EXPECT_TRUE(
      MakeAttentionGrid(AttentionPart::kScores, qkv, probs, 4, 16, 1, 17, 0)
          .ok());
  EXPECT_FALSE(
      MakeAttentionGrid(AttentionPart::kScores, qkv, probs, 4, 16, 18, 1, 0)
          .ok());
  EXPECT_FALSE(
      MakeAttentionGrid(AttentionPart::kScores, qkv, probs, 3, 16, 1, 1, 0)
          .ok());
  // Cross-attention: one query row, so m = 1 only; a fused qkv cannot have
  // Tq != Tk.
  const std::vector<int64_t> kv = {17, 2 * 4 * 16};
  const std::vector<int64_t> one = {1, 4, 1, 17};
  EXPECT_TRUE(
      MakeAttentionGrid(AttentionPart::kScores, kv, one, 4, 16, 1, 17, 0)
          .ok());
  EXPECT_FALSE(
      MakeAttentionGrid(AttentionPart::kScores, kv, one, 4, 16, 2, 1, 0).ok());
  EXPECT_FALSE(
      MakeAttentionGrid(AttentionPart::kScores, qkv, one, 4, 16, 1, 1, 0)
          .ok());
}

TEST(AttentionPlanTest, PriceCountsOneKernelPerTileAndTheDelivery) {
  const std::vector<int64_t> qkv = {17, 3 * 4 * 16};
  const std::vector<int64_t> probs = {1, 4, 17, 17};
  StatusOr<AttentionGrid> g =
      MakeAttentionGrid(AttentionPart::kScores, qkv, probs, 4, 16, 2, 1, 0);
  ASSERT_TRUE(g.ok());
  auto target = std::make_unique<fb::TargetT>();
  const Status loaded = ir::LoadTarget("tiny", target.get());
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  StatusOr<kernels::CostModel> model = kernels::CostModel::Create(*target);
  ASSERT_TRUE(model.ok()) << model.status().message();
  StatusOr<AttentionCost> cost =
      PriceAttention(*g, BlockedOwnership({1, 1}), qkv, fb::DType::F16,
                     fb::DType::F16, *model, *target);
  ASSERT_TRUE(cost.ok()) << cost.status().message();
  // 8 tiles need q and k blocks that tile 0 holds: one exchange phase.
  EXPECT_EQ(cost->phases, 1);
  EXPECT_GT(cost->exchange.phase_cycles, 0);
  StatusOr<int64_t> kernel =
      AttentionKernelCycles(*g, *model, fb::DType::F16, 0, 0);
  ASSERT_TRUE(kernel.ok());
  EXPECT_EQ(cost->kernel_cycles, *kernel);  // 9 rows x 16 x 17 keys
  EXPECT_EQ(cost->stage_bytes, (9 * 16 + 17 * 16) * 2);
  EXPECT_EQ(cost->Cycles(), cost->compute + cost->exchange.phase_cycles);

  // The lower bound (each transfer one fragment, no pieces built) is never
  // above the schedule, and the compute is the same.
  StatusOr<AttentionCost> bound =
      PriceAttention(*g, BlockedOwnership({1, 1}), qkv, fb::DType::F16,
                     fb::DType::F16, *model, *target, PhaseTiming::kLowerBound);
  ASSERT_TRUE(bound.ok()) << bound.status().message();
  EXPECT_EQ(bound->phases, 1);
  EXPECT_GT(bound->exchange.phase_cycles, 0);
  EXPECT_LE(bound->exchange.phase_cycles, cost->exchange.phase_cycles);
  EXPECT_EQ(bound->exchange.bytes_received, cost->exchange.bytes_received);
  EXPECT_EQ(bound->compute, cost->compute);
}

}  // namespace
}  // namespace tilec::passes
