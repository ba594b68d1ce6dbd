// End-to-end tests of the lowering on hand-made plans (docs/planning.md) on
// the tiny target: emit-device's program must simulate like the reference
// and cost exactly what emit-device predicted.
//
// Tolerances: with k = 1 every output element is one F32 sum in k order,
// exactly as the reference computes it (staged chunks accumulate in the same
// order), so F16 outputs agree exactly. K-split partials are summed in ki
// order after the fact, which can flip an F16 rounding: the simulator's
// default tolerance (docs/device-program.md) applies.

#include "passes/lower/emit_device.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <map>
#include <optional>
#include <string_view>
#include <tuple>

#include "formats/ir.h"
#include "formats/op_shapes.h"
#include "formats/print.h"
#include "formats/test_graph.h"
#include "kernels/exchange_schedule.h"
#include "passes/core/ownership.h"
#include "passes/import/model_builder.h"
#include "passes/lower/emitter.h"
#include "passes/lower/expand_reduce.h"
#include "passes/lower/hand_plan.h"

namespace tilec::lower {
namespace {

using testing::GemmShape;
using testing::Import;
using testing::MlpPlan;
using testing::PlanMlpBlock;
using testing::PlanTwins;
using testing::SimCheck;
using testing::SimulateAgainstReference;

// Exactness is checked on max_abs_err; the cosine of equal tensors is 1 up
// to rounding in its own computation.
constexpr sim::Tolerance kExact{0, 0, 0.999999};
constexpr sim::Tolerance kDefault{2e-2, 1e-2, 0.9999};

fb::ModuleT PlannedMlp(const MlpPlan& plan, int64_t tokens = 12,
                       int64_t width = 32, int64_t mlp = 64) {
  fb::ModuleT m = Import("siglip-so400m-384", "mlp-block", "tiny", tokens,
                         width, mlp, /*heads=*/1);
  PlanMlpBlock(&m, plan);
  Status s = ExpandReducePass().Run(&m).status();
  EXPECT_TRUE(s.ok()) << s.message();
  return m;
}

// Emits, simulates, compares; returns the check.
SimCheck EmitAndSimulate(fb::ModuleT* m, const sim::Tolerance& tol,
                         EmitOptions options = {},
                         passes::PassOptions common = {}) {
  EmitDevicePass emit(options, common);
  Status s = emit.Run(m).status();
  const EmitSummary& summary = emit.summary();
  EXPECT_TRUE(s.ok()) << s.message();
  SimCheck check;
  if (!s.ok()) return check;
  s = SimulateAgainstReference(*m, tol, &check);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(check.pass) << check.message;
  // The emitter's prediction is the simulator's count, slow paths included.
  EXPECT_EQ(check.result.total_cycles, summary.predicted_cycles);
  EXPECT_EQ(check.result.peak_memory_bytes, summary.peak_bytes);
  if (const char* path = std::getenv("EMIT_DUMP")) {
    EXPECT_TRUE(ir::WriteModule(*m, "emit_device_test", path).ok());
  }
  return check;
}

// Row copies on placements the planner would not pick, by hand: a class
// token on tile 9 before patches held twice (blocked(2x1, rep=2) on tiles
// 0-3: the replicas share the sending) into rows on tiles 4-7; a position
// table on tile 5 broadcast to two images held whole on tile 0 (one
// multicast naming tile 0 twice); class rows picked from flat grains
// (pieces cut mid-row) onto tiles 6-7, tile 7 holding part of its row.
TEST(EmitDeviceTest, CopyRowsOnHandPlacements) {
  fb::ModuleT m;
  m.target = std::make_unique<fb::TargetT>();
  ASSERT_TRUE(ir::LoadTarget("tiny", m.target.get()).ok());
  auto value = [&](const char* name, std::vector<int64_t> shape,
                   fb::ValueRole role, fb::OwnershipT owner) {
    const uint32_t id = ir::testing::AddValue(&m, name, std::move(shape),
                                              role, 40 + m.values.size());
    m.values[id]->ownership =
        std::make_unique<fb::OwnershipT>(std::move(owner));
    return id;
  };
  auto copy = [&](const char* name, std::vector<uint32_t> operands,
                  uint32_t result,
                  std::vector<std::array<int64_t, 4>> segments) {
    fb::OperationT* op = ir::testing::AddOp(&m, fb::OpKind::CopyRows, name,
                                            std::move(operands), result);
    for (const auto& [k, first, count, at] : segments) {
      ir::AppendRowSegment({static_cast<uint32_t>(k), first, count, at}, op);
    }
    op->recipe = std::make_unique<fb::RecipeT>();
    op->recipe->kind = fb::RecipeKind::Copy;
    op->recipe->layout = std::make_unique<fb::OwnershipT>(
        *m.values[result]->ownership);
  };
  using passes::BlockedOwnership;
  using passes::FlatOwnership;
  const uint32_t patches = value("patches", {6, 8}, fb::ValueRole::Input,
                                 BlockedOwnership({2, 1}, 2));
  const uint32_t cls = value("cls", {1, 8}, fb::ValueRole::Weight,
                             BlockedOwnership({1, 1}, 1, 9));
  const uint32_t pos = value("pos", {4, 8}, fb::ValueRole::Weight,
                             BlockedOwnership({1, 1}, 1, 5));
  const uint32_t tokens = value("tokens", {8, 8}, fb::ValueRole::Output,
                                BlockedOwnership({4, 1}, 1, 4));
  const uint32_t positions = value("positions", {8, 8},
                                   fb::ValueRole::Output,
                                   BlockedOwnership({1, 1}));
  const uint32_t x = value("x", {8, 6}, fb::ValueRole::Input,
                           FlatOwnership(4, 12));
  const uint32_t heads = value("heads", {2, 6}, fb::ValueRole::Output,
                               BlockedOwnership({2, 1}, 1, 6));
  copy("prepend", {cls, patches}, tokens,
       {{0, 0, 1, 0}, {1, 0, 3, 1}, {0, 0, 1, 4}, {1, 3, 3, 5}});
  copy("broadcast", {pos}, positions, {{0, 0, 4, 0}, {0, 0, 4, 4}});
  copy("pick", {x}, heads, {{0, 0, 1, 0}, {0, 4, 1, 1}});
  ASSERT_TRUE(ir::VerifyModule(m).ok()) << ir::VerifyModule(m).message();
  const SimCheck check = EmitAndSimulate(&m, kExact);
  EXPECT_EQ(check.max_abs_err, 0);
  // The broadcast: tile 5 sends each piece once, to tile 0 twice.
  int to_tile_zero_twice = 0;
  for (const auto& step : m.program->supersteps) {
    for (const auto& t : step->exchange) {
      if (t->src_tile != 5) continue;
      int zero = 0;
      for (const auto& d : t->destinations) zero += d->tile == 0;
      to_tile_zero_twice += zero == 2;
    }
  }
  EXPECT_GE(to_tile_zero_twice, 1);
}

TEST(EmitDeviceTest, KSplitBothGemms) {
  MlpPlan plan;
  plan.up = GemmShape{2, 2, 2};
  plan.down = GemmShape{2, 2, 4};
  fb::ModuleT m = PlannedMlp(plan);
  EmitAndSimulate(&m, kDefault);
}


TEST(EmitDeviceTest, NoKSplitIsExact) {
  MlpPlan plan;
  plan.up = GemmShape{2, 4, 1};
  plan.down = GemmShape{4, 2, 1};
  fb::ModuleT m = PlannedMlp(plan);
  const SimCheck c = EmitAndSimulate(&m, kExact);
  EXPECT_EQ(c.max_abs_err, 0);
}

TEST(EmitDeviceTest, StreamedAndBatchedStagingAreExactWithoutKSplit) {
  MlpPlan plan;
  plan.up = GemmShape{2, 4, 1, 0, 1, fb::Staging::Streamed, 16};
  plan.down = GemmShape{3, 2, 1, 0, 1, fb::Staging::Batched, 16, 2};
  fb::ModuleT m = PlannedMlp(plan);
  const SimCheck c = EmitAndSimulate(&m, kExact);
  EXPECT_EQ(c.max_abs_err, 0);
  // The up GEMM streams its 32 K columns in two chunks: two exchange
  // phases for its left operand.
  EXPECT_GE(c.result.exchange_phases, 3);
}

TEST(EmitDeviceTest, UnevenSplitsWithStagingAndKSplit) {
  // 13 tokens, width 40, MLP 72: every split is uneven.
  MlpPlan plan;
  plan.ln_parts = 5;
  plan.up = GemmShape{3, 2, 2, 0, 1, fb::Staging::Streamed, 16};
  plan.down = GemmShape{2, 3, 2, 2, 1, fb::Staging::Batched, 16, 2};
  fb::ModuleT m = PlannedMlp(plan, 13, 40, 72);
  EmitAndSimulate(&m, kDefault);
}

TEST(EmitDeviceTest, FlatLayoutsAndStridedGrid) {
  MlpPlan plan;
  plan.ln_parts = 3;
  plan.ln_first = 5;
  plan.up = GemmShape{2, 2, 2, 1, 2};  // tiles 1, 3, 5, ...
  plan.down = GemmShape{2, 1, 3};
  plan.bias_flat = true;
  plan.gelu_flat = true;
  fb::ModuleT m = PlannedMlp(plan, 11, 24, 56);
  EmitAndSimulate(&m, kDefault);
}

TEST(EmitDeviceTest, EveryFallbackStillComputesTheSameOutput) {
  MlpPlan plan;
  plan.up = GemmShape{2, 2, 2};
  plan.down = GemmShape{2, 2, 4};
  fb::ModuleT shared = PlannedMlp(plan);
  const SimCheck a = EmitAndSimulate(&shared, kDefault);
  // No superstep sharing, no in-place operands.
  fb::ModuleT apart = PlannedMlp(plan);
  EmitOptions options;
  options.share_supersteps = false;
  options.alias_in_place = false;
  const SimCheck b = EmitAndSimulate(&apart, kDefault, options);
  EXPECT_GT(b.result.supersteps.size(), a.result.supersteps.size());
  EXPECT_GE(b.result.total_cycles, a.result.total_cycles);
  // No transforming decision at all, in either pass: copies everywhere.
  fb::ModuleT none = Import("siglip-so400m-384", "mlp-block", "tiny", 12, 32, 64, 1);
  PlanMlpBlock(&none, plan);
  passes::PassOptions zero;
  zero.max_decisions = 0;
  ASSERT_TRUE(ExpandReducePass({}, zero).Run(&none).status().ok());
  const SimCheck c = EmitAndSimulate(&none, kDefault, {}, zero);
  // Sharing supersteps changes when work runs, not what it computes; the
  // fallback keeps F32 partials (16-bit ones round each partial once).
  EXPECT_EQ(a.result.outputs, b.result.outputs);
  EXPECT_GT(c.result.total_cycles, a.result.total_cycles);
}

// A block (48 tokens, width 64, MLP `mlp`; up m1 k2 n2, down m2 k2 n1)
// emitted sharing supersteps (`shared`, its module in `module`) and not
// (`apart`).
struct SharedAndApart {
  fb::ModuleT module;
  SimCheck shared, apart;
};

SharedAndApart EmitSharedAndApart(int64_t mlp) {
  MlpPlan plan;
  plan.up = GemmShape{1, 2, 2};
  plan.down = GemmShape{2, 2, 1};
  SharedAndApart r;
  r.module = PlannedMlp(plan, 48, 64, mlp);
  r.shared = EmitAndSimulate(&r.module, kDefault);
  fb::ModuleT apart = PlannedMlp(plan, 48, 64, mlp);
  EmitOptions options;
  options.share_supersteps = false;
  r.apart = EmitAndSimulate(&apart, kDefault, options);
  return r;
}

// Whether a decision of `m`'s log has an action starting with `action`
// (and outcome `outcome`, if given).
bool Logged(const fb::ModuleT& m, std::string_view action,
            std::optional<fb::Outcome> outcome = std::nullopt) {
  for (const auto& run : m.log) {
    for (const auto& d : run->decisions) {
      if (d->action.rfind(action, 0) == 0 &&
          (!outcome || d->outcome == *outcome)) {
        return true;
      }
    }
  }
  return false;
}

// Sharing every superstep it could does not fit this block's memory, in
// any placement order: emit-device keeps the shared ops whose buffers were
// live where a tile ran out to supersteps of their own and still shares
// the rest, instead of sharing none; the outputs are the same.
TEST(EmitDeviceTest, SharesWhatMemoryAllowsWhenAllDoesNotFit) {
  const SharedAndApart r = EmitSharedAndApart(288);
  EXPECT_TRUE(Logged(r.module, "keep ops (", fb::Outcome::Rejected));
  EXPECT_TRUE(Logged(r.module, "share supersteps ", fb::Outcome::Accepted));
  for (const auto& run : r.module.log) {
    for (const auto& d : run->decisions) {
      EXPECT_NE(d->action, "share supersteps between ops");
    }
  }
  EXPECT_LT(r.shared.result.supersteps.size(),
            r.apart.result.supersteps.size());
  EXPECT_LE(r.shared.result.total_cycles, r.apart.result.total_cycles);
  EXPECT_EQ(r.shared.result.outputs, r.apart.result.outputs);
}

// With an MLP of 256 the same block shares every superstep it could: first
// fit in lifetime order leaves a tile no gap for one buffer, and largest
// first places it (a logged fallback); the outputs are the unshared
// program's.
TEST(EmitDeviceTest, LargestFirstPlacesWhatLifetimeOrderCannot) {
  const SharedAndApart r = EmitSharedAndApart(256);
  EXPECT_TRUE(
      Logged(r.module, "buffers placed largest first", fb::Outcome::Info));
  EXPECT_FALSE(Logged(r.module, "keep ops ("));
  EXPECT_EQ(r.shared.result.outputs, r.apart.result.outputs);
}

TEST(EmitDeviceTest, Deterministic) {
  MlpPlan plan;
  plan.up = GemmShape{2, 2, 2, 0, 1, fb::Staging::Streamed, 16};
  plan.down = GemmShape{2, 2, 4};
  std::string bytes[2];
  for (std::string& b : bytes) {
    fb::ModuleT m = PlannedMlp(plan);
    ASSERT_TRUE(EmitDevicePass().Run(&m).status().ok());
    ASSERT_TRUE(ir::SerializeModule(std::move(m), "test", &b).ok());
  }
  EXPECT_EQ(bytes[0], bytes[1]);
}

// Every superstep's schedule is the one its traffic gets scheduled afresh:
// the schedules emit-device kept from pricing (ScheduleStep) are those of
// exactly the superstep's transfers, here also after ops were kept apart
// and the program scheduled again.
TEST(EmitDeviceTest, KeptSchedulesAreTheirTrafficsSchedules) {
  MlpPlan plan;
  plan.up = GemmShape{1, 2, 2};
  plan.down = GemmShape{2, 2, 1};
  fb::ModuleT m = PlannedMlp(plan, 48, 64, 288);
  ASSERT_TRUE(EmitDevicePass().Run(&m).status().ok());
  const fb::DeviceProgramT& program = *m.program;
  const kernels::ExchangeModel model =
      kernels::ExchangeModel::FromTarget(*m.target);
  auto address_of = [&](uint32_t buffer) -> int64_t {
    return program.buffers[buffer]->offset;
  };
  int scheduled = 0;
  for (const auto& step : program.supersteps) {
    if (step->exchange.empty()) continue;
    ++scheduled;
    const fb::ExchangeScheduleT fresh = kernels::SchedulePhase(
        kernels::TrafficOfStep(model, *step, address_of));
    const fb::ExchangeScheduleT& kept = *step->schedule;
    EXPECT_EQ(kept.starts, fresh.starts);
    EXPECT_EQ(kept.length, fresh.length);
    EXPECT_EQ(kept.bound, fresh.bound);
    ASSERT_EQ(kept.tiles.size(), fresh.tiles.size());
    for (size_t t = 0; t < kept.tiles.size(); ++t) {
      EXPECT_EQ(kept.tiles[t]->tile, fresh.tiles[t]->tile);
      const auto& a = kept.tiles[t]->instructions;
      const auto& b = fresh.tiles[t]->instructions;
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(std::tuple(a[i].cycle(), a[i].packet(), a[i].destination(),
                             a[i].kind()),
                  std::tuple(b[i].cycle(), b[i].packet(), b[i].destination(),
                             b[i].kind()));
      }
    }
  }
  EXPECT_GT(scheduled, 1);
}

// WriteModule frees a device program's supersteps as it packs them
// (formats/ir.cc, PackProgramFirst): the file holds SerializeModule's bytes.
TEST(EmitDeviceTest, WrittenProgramIsTheSerializedOne) {
  MlpPlan plan;
  plan.up = GemmShape{2, 2, 2};
  plan.down = GemmShape{2, 2, 1};
  fb::ModuleT m = PlannedMlp(plan);
  ASSERT_TRUE(EmitDevicePass().Run(&m).status().ok());
  ASSERT_GE(m.program->supersteps.size(), 4u);  // one trim at least
  std::string serialized, written;
  ASSERT_TRUE(
      ir::SerializeModule(*ir::CloneModule(m), "test", &serialized).ok());
  const std::string path = ::testing::TempDir() + "/written.tilec";
  ASSERT_TRUE(ir::WriteModule(std::move(m), "test", path).ok());
  ASSERT_TRUE(ir::ReadFile(path, &written).ok());
  EXPECT_EQ(written, serialized);
}

// Phases priced aside, on the pricer's thread while the caller goes on,
// get CostOfExchange's cycles and schedule, each into its own place, in the
// order they were added.
TEST(EmitDeviceTest, PhasesPricedAsideAreCostOfExchange) {
  fb::TargetT target;
  ASSERT_TRUE(ir::LoadTarget("tiny", &target).ok());
  StatusOr<kernels::CostModel> model = kernels::CostModel::Create(target);
  ASSERT_TRUE(model.ok());
  std::vector<Phase> phases(12);
  for (size_t p = 0; p < phases.size(); ++p) {
    phases[p].kind = Phase::Kind::kExchange;
    // Each tile sends a few pieces of different sizes to one, two or
    // three others.
    for (int from = 0; from < target.tiles; ++from) {
      for (int k = 0; k < 1 + static_cast<int>(p % 3); ++k) {
        VTransfer t;
        t.src_tile = from;
        t.src = {0, 256 * k, static_cast<int64_t>(64 + 40 * p + 8 * k)};
        for (int d = 1; d <= 1 + (from + k) % 3; ++d) {
          t.destinations.push_back(
              {(from + d * (1 + static_cast<int>(p))) % target.tiles, 1,
               static_cast<int64_t>(512 * from + 256 * k)});
        }
        phases[p].transfers.push_back(t);
      }
    }
  }
  std::vector<int64_t> cycles(phases.size(), -1);
  std::vector<KeptStarts> starts(phases.size());
  {
    PhasesPricedAside aside(*model);
    for (size_t p = 0; p < phases.size(); ++p) {
      EXPECT_EQ(aside.Add(&phases[p], &cycles[p], &starts[p]), p + 1);
    }
    // In the order added: the first half are in, whatever the rest do.
    aside.WaitForFirst(phases.size() / 2);
    for (size_t p = 0; p < phases.size() / 2; ++p) {
      EXPECT_GT(cycles[p], 0) << "phase " << p;
    }
    aside.Finish();
  }
  for (size_t p = 0; p < phases.size(); ++p) {
    std::vector<const VTransfer*> transfers;
    for (const VTransfer& t : phases[p].transfers) transfers.push_back(&t);
    const ExchangeCost want = CostOfExchange(*model, transfers);
    EXPECT_GT(want.cycles, 0);
    EXPECT_EQ(cycles[p], want.cycles) << "phase " << p;
    ASSERT_NE(starts[p], nullptr);
    EXPECT_EQ(*starts[p], want.starts) << "phase " << p;
  }
  // Destroyed without a Finish, or with nothing added: no thread is left.
  {
    int64_t c = -1;
    KeptStarts s;
    PhasesPricedAside aside(*model);
    aside.Add(&phases[0], &c, &s);
  }
  { PhasesPricedAside idle(*model); }
}

TEST(EmitDeviceTest, OutOfMemoryNamesTileBuffersAndShortfall) {
  // 256 x 256 x 1024 on two tiles cannot fit 56 KiB per tile.
  MlpPlan plan;
  plan.ln_parts = 2;
  plan.up = GemmShape{1, 2, 1};
  plan.down = GemmShape{1, 2, 1};
  fb::ModuleT m = PlannedMlp(plan, 64, 128, 256);
  Status s = EmitDevicePass().Run(&m).status();
  ASSERT_EQ(s.code(), StatusCode::kInfeasible) << s.message();
  EXPECT_NE(s.message().find("is out of memory at "), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("shortfall"), std::string::npos);
  EXPECT_NE(s.message().find("live: \""), std::string::npos);
  EXPECT_NE(s.message().find(" op "), std::string::npos);
}

// Calls of `kernel` for op `op_name` per tile, over the whole program.
std::map<uint32_t, int> CallsPerTile(const fb::ModuleT& m,
                                     const std::string& op_name,
                                     const std::string& kernel) {
  uint32_t id = 0;
  for (const auto& op : m.ops) {
    if (op->name == op_name) id = op->id;
  }
  std::map<uint32_t, int> calls;
  for (const auto& step : m.program->supersteps) {
    for (const auto& c : step->compute) {
      if (c->op == id && c->kernel == kernel) ++calls[c->tile];
    }
  }
  return calls;
}

const fb::DecisionT* FindDecision(const fb::ModuleT& m, const std::string& pass,
                                  const std::string& action) {
  for (const auto& run : m.log) {
    if (run->pass != pass) continue;
    for (const auto& d : run->decisions) {
      if (d->action == action) return d.get();
    }
  }
  return nullptr;
}

TEST(EmitDeviceTest, FlatElementwiseRunsOnceOverEachTilesRange) {
  // GELU over flat 4-element grains: a tile's range crosses rows (several
  // row boxes), yet it is contiguous in the operand and the result, so
  // GELU is one call per tile.
  MlpPlan plan;
  plan.up = GemmShape{2, 4, 1};
  plan.down = GemmShape{4, 2, 1};
  plan.gelu_flat = true;
  fb::ModuleT m = PlannedMlp(plan);
  const SimCheck c = EmitAndSimulate(&m, kExact);
  EXPECT_EQ(c.max_abs_err, 0);
  const std::map<uint32_t, int> gelu = CallsPerTile(m, "l0.mlp.gelu", "gelu");
  EXPECT_EQ(gelu.size(), 16u);
  for (const auto& [tile, calls] : gelu) EXPECT_EQ(calls, 1) << "tile " << tile;
}

TEST(EmitDeviceTest, KPiecesCutAPanelAtItsLocallyHeldColumns) {
  // up m2 x k1 x n4: its result and GELU are blocked(2x4), 16 of the 64
  // columns a tile. down m2 x k2 x n1 (F32 partials: K pieces accumulate):
  // tile 0's panel is rows 0-5 x columns [0, 32), of which GELU left
  // [0, 16) on tile 0 itself, strided in the panel (one copy per row).
  // Cut into K pieces at 16, that part is one piece and arrives with one
  // copy.
  MlpPlan plan;
  plan.up = GemmShape{2, 4, 1};
  plan.down = GemmShape{2, 1, 2};
  fb::ModuleT m = Import("siglip-so400m-384", "mlp-block", "tiny", 12, 32, 64,
                         /*heads=*/1);
  PlanMlpBlock(&m, plan);
  ExpandReduceOptions f32;
  f32.allow_16bit_partials = false;
  ASSERT_TRUE(ExpandReducePass(f32).Run(&m).status().ok());
  EmitAndSimulate(&m, kDefault);
  const fb::DecisionT* d = FindDecision(
      m, "emit-device", "cut staged panels into K pieces at locally held columns");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->outcome, fb::Outcome::Accepted) << d->reason;
  EXPECT_LT(d->cycles_after, d->cycles_before);
  EXPECT_EQ(CallsPerTile(m, "l0.mlp.down", "copy"),
            (std::map<uint32_t, int>{{0, 1}}));
  EXPECT_EQ(CallsPerTile(m, "l0.mlp.down", "gemm").at(0), 2);
}

// The MLP block with the bias add, GELU and a cast to FP8 fused into one
// op (what a fusion pass writes), its FP8 result cast back to F16 for the
// down GEMM.
void FuseBiasGeluCast(fb::ModuleT* m) {
  fb::OperationT* bias = testing::FindOp(m, "l0.mlp.up_bias");
  fb::OperationT* gelu = testing::FindOp(m, "l0.mlp.gelu");
  auto step = [](fb::FusedStepKind kind, int operand) {
    auto s = std::make_unique<fb::FusedStepT>();
    s->kind = kind;
    s->operand = operand;
    return s;
  };
  bias->kind = fb::OpKind::Fused;
  bias->body.push_back(step(fb::FusedStepKind::BiasAdd, 1));
  bias->body.push_back(step(fb::FusedStepKind::Gelu, -1));
  bias->body.back()->gelu = gelu->gelu;
  bias->body.push_back(step(fb::FusedStepKind::Cast, -1));
  bias->body.back()->dtype = fb::DType::FP8E4M3;
  bias->body.back()->fp8_scale_exp = 4;
  fb::ValueT* mid = testing::FindValue(m, bias->results[0]);
  mid->dtype = fb::DType::FP8E4M3;
  mid->fp8_scale_exp = 4;
  gelu->kind = fb::OpKind::Cast;
}

TEST(EmitDeviceTest, FusedBiasGeluFoldsItsCast) {
  // One bias_gelu call per tile writing FP8 (the bias_gelu_fp8 formula),
  // no cast: the kernel rounds its F32 result once, as the cast would.
  fb::ModuleT m = Import("siglip-so400m-384", "mlp-block", "tiny", 12, 32, 64,
                         /*heads=*/1);
  FuseBiasGeluCast(&m);
  MlpPlan plan;
  plan.up = GemmShape{2, 4, 1};
  plan.down = GemmShape{4, 2, 1};
  PlanMlpBlock(&m, plan);
  ASSERT_TRUE(ExpandReducePass().Run(&m).status().ok());
  EmitAndSimulate(&m, sim::Tolerance{0.1, 0.1, 0.99});
  const std::map<uint32_t, int> fused =
      CallsPerTile(m, "l0.mlp.up_bias", "bias_gelu");
  EXPECT_EQ(fused.size(), 8u);
  for (const auto& [tile, calls] : fused) EXPECT_EQ(calls, 1) << "tile " << tile;
  EXPECT_TRUE(CallsPerTile(m, "l0.mlp.up_bias", "cast").empty());
}

TEST(EmitDeviceTest, KSplitWithoutExpandReduceIsRefused) {
  fb::ModuleT m = Import("siglip-so400m-384", "mlp-block", "tiny", 12, 32, 64, 1);
  MlpPlan plan;
  plan.up = GemmShape{2, 2, 2};
  plan.down = GemmShape{2, 2, 4};
  PlanMlpBlock(&m, plan);
  Status s = EmitDevicePass().Run(&m).status();
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
  EXPECT_NE(s.message().find("run expand-reduce first"), std::string::npos);
}

TEST(EmitDeviceTest, UnplannedModuleIsRefused) {
  fb::ModuleT m = Import("siglip-so400m-384", "mlp-block", "tiny", 12, 32, 64, 1);
  Status s = EmitDevicePass().Run(&m).status();
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
  EXPECT_NE(s.message().find("run plan-ownership first"), std::string::npos);
}

TEST(EmitDeviceTest, KSplitGemmsMakeOneCallPerTileAndOnePiecePerPartial) {
  // up: [12,32] x [32,64] on m2 x k3 x n2 (the issue-16 shape in small:
  // the k tiles of a block reduce a third of its rows each). Every grid
  // tile makes one GEMM call over its whole 6 x 11 x 32 block, and every
  // remote partial arrives as one contiguous piece.
  MlpPlan plan;
  plan.up = GemmShape{2, 2, 3};
  plan.down = GemmShape{2, 2, 2};
  fb::ModuleT m = PlannedMlp(plan);
  EmitAndSimulate(&m, kDefault);
  const std::map<uint32_t, int> calls = CallsPerTile(m, "l0.mlp.up", "gemm");
  EXPECT_EQ(calls.size(), 12u);
  for (const auto& [tile, n] : calls) EXPECT_EQ(n, 1) << "tile " << tile;
  const uint32_t up = testing::FindOp(&m, "l0.mlp.up")->id;
  for (const auto& step : m.program->supersteps) {
    for (const auto& t : step->exchange) {
      if (t->op == up && step->label.find("partials") != std::string::npos) {
        EXPECT_EQ(t->rows, 1u);
      }
    }
  }
}

// Three MLP blocks rolled into a repeat (docs/repeat.md): the program holds
// one block's supersteps, runs them three times with the twins' buffers,
// and computes what the written-out blocks compute.
TEST(EmitDeviceRepeatTest, RolledBlocksRunLikeTheWrittenOutOnes) {
  MlpPlan plan;
  plan.up = GemmShape{2, 4, 1};
  plan.down = GemmShape{4, 1, 1};  // result rows as the LayerNorm's input
  auto build = [&](bool repeat) {
    fb::ModuleT m;
    m.target = std::make_unique<fb::TargetT>();
    EXPECT_TRUE(ir::LoadTarget("tiny", m.target.get()).ok());
    passes::ModelOverrides o;
    o.tokens = 12;
    o.width = 32;
    o.mlp_width = 64;
    o.heads = 1;
    o.layers = 3;
    o.repeat = repeat;
    EXPECT_TRUE(passes::BuildModel("siglip-so400m-384", "mlp-block", o, &m).ok());
    return m;
  };
  fb::ModuleT rolled = build(true);
  ASSERT_EQ(rolled.repeats.size(), 1u);
  PlanMlpBlock(&rolled, plan);
  PlanTwins(&rolled);
  ASSERT_TRUE(ExpandReducePass().Run(&rolled).ok());
  const SimCheck c = EmitAndSimulate(&rolled, kExact);
  EXPECT_EQ(c.max_abs_err, 0);
  ASSERT_EQ(rolled.program->repeats.size(), 1u);
  const fb::SuperstepRepeatT& r = *rolled.program->repeats[0];
  EXPECT_EQ(r.iterations.size(), 3u);
  EXPECT_EQ(r.first + r.count, rolled.program->supersteps.size());
  EXPECT_TRUE(r.iterations[0]->renames.empty());
  EXPECT_FALSE(r.iterations[2]->renames.empty());
  // Iterations after the first also pay for their address updates.
  int64_t updates = 0;
  for (const sim::SuperstepReport& s : c.result.supersteps) {
    if (s.iteration == 2) updates += s.update_cycles;
  }
  EXPECT_GT(updates, 0);
  EXPECT_EQ(c.result.repeats[0].iteration_cycles[0] + updates,
            c.result.repeats[0].iteration_cycles[2]);
  EXPECT_EQ(c.result.repeats[0].iteration_cycles[1],
            c.result.repeats[0].iteration_cycles[2]);
  // Every weight of every block is resident and bound by the host.
  EXPECT_EQ(rolled.program->inputs.size(), 1u + 6u * 3u);
}

}  // namespace
}  // namespace tilec::lower
