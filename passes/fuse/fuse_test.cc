// fuse-elementwise and fuse-residual, rule by rule on the tiny target:
// chain growth, a type-changing region, multi-consumer refusal, each
// placement across a redistribution, the read-back of a plan, and end to
// end: fused programs simulate like the reference and like the unfused
// ones, with predicted cycles equal to simulated.

#include "passes/fuse/fuse.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "formats/ir.h"
#include "formats/print.h"
#include "formats/repeat.h"
#include "passes/fuse/residual.h"
#include "passes/import/model_builder.h"
#include "passes/lower/hand_plan.h"
#include "passes/pipeline/pipeline.h"
#include "passes/plan/planner.h"
#include "passes/quantize/quantize.h"
#include "passes/plan/test_modules.h"

namespace tilec::fuse {
namespace {

// A graph built by hand: values and ops added in order.
struct Builder {
  fb::ModuleT m;
  Builder() {
    m.target = std::make_unique<fb::TargetT>();
    EXPECT_TRUE(ir::LoadTarget("tiny", m.target.get()).ok());
  }
  uint32_t Value(const std::string& name, std::vector<int64_t> shape,
                 fb::ValueRole role, fb::DType dtype = fb::DType::F16,
                 int scale_exp = 0) {
    auto v = std::make_unique<fb::ValueT>();
    v->id = static_cast<uint32_t>(m.values.size());
    v->name = name;
    v->shape = std::move(shape);
    v->dtype = dtype;
    v->fp8_scale_exp = scale_exp;
    v->role = role;
    if (role != fb::ValueRole::Activation && role != fb::ValueRole::Output) {
      v->init = std::make_unique<fb::WeightInitT>();
      v->init->seed = v->id + 11;
      v->init->stddev = 1.0f;
    }
    m.values.push_back(std::move(v));
    return m.values.back()->id;
  }
  void Op(fb::OpKind kind, const std::string& name,
          std::vector<uint32_t> operands, uint32_t result) {
    auto op = std::make_unique<fb::OperationT>();
    op->id = static_cast<uint32_t>(m.ops.size());
    op->kind = kind;
    op->name = name;
    op->operands = std::move(operands);
    op->results = {result};
    m.ops.push_back(std::move(op));
  }
};

fb::ModuleT Planned(fb::ModuleT m, const std::string& recipe = "") {
  plan::PlannerOptions po;
  po.attempts = 16;
  po.recipe_text = recipe;
  po.recipe_name = "test.recipe";
  plan::PlanOwnershipPass planner(po);
  StatusOr<bool> ran = planner.Run(&m);
  EXPECT_TRUE(ran.ok()) << ran.status().message();
  return m;
}

struct Fused {
  fb::ModuleT module;
  std::vector<fb::DecisionT> decisions;
  bool changed = false;
};

Fused RunFuse(fb::ModuleT m, FuseOptions options = {},
              passes::PassOptions common = {}) {
  FuseElementwisePass pass(options, common);
  StatusOr<bool> ran = pass.Run(&m);
  EXPECT_TRUE(ran.ok()) << ran.status().message();
  Fused out;
  out.changed = ran.ok() && *ran;
  for (const auto& d : m.log.back()->decisions) out.decisions.push_back(*d);
  out.module = std::move(m);
  return out;
}

const fb::OperationT* OpOfKind(const fb::ModuleT& m, fb::OpKind kind) {
  for (const auto& op : m.ops) {
    if (op->kind == kind) return op.get();
  }
  return nullptr;
}

int Count(const fb::ModuleT& m, fb::OpKind kind) {
  int n = 0;
  for (const auto& op : m.ops) n += op->kind == kind;
  return n;
}

// bias add -> GELU -> cast to FP8: the region grows over both pairs, and
// the body is one bias_gelu call writing FP8 (F16 in, FP8 out).
TEST(FuseElementwiseTest, ChainGrowsAndChangesType) {
  Builder b;
  const uint32_t x = b.Value("x", {32, 64}, fb::ValueRole::Input);
  const uint32_t bias = b.Value("bias", {64}, fb::ValueRole::Weight);
  const uint32_t h = b.Value("h", {32, 64}, fb::ValueRole::Activation);
  const uint32_t g = b.Value("g", {32, 64}, fb::ValueRole::Activation);
  const uint32_t q = b.Value("q", {32, 64}, fb::ValueRole::Output,
                             fb::DType::FP8E4M3, 4);
  b.Op(fb::OpKind::BiasAdd, "bias", {x, bias}, h);
  b.Op(fb::OpKind::Gelu, "gelu", {h}, g);
  b.Op(fb::OpKind::Cast, "cast", {g}, q);
  Fused f = RunFuse(Planned(std::move(b.m)));
  ASSERT_TRUE(f.changed);
  ASSERT_EQ(Count(f.module, fb::OpKind::Fused), 1);
  EXPECT_EQ(f.module.ops.size(), 1u);
  const fb::OperationT& op = *OpOfKind(f.module, fb::OpKind::Fused);
  ASSERT_EQ(op.body.size(), 3u);
  EXPECT_EQ(op.body[0]->kind, fb::FusedStepKind::BiasAdd);
  EXPECT_EQ(op.body[1]->kind, fb::FusedStepKind::Gelu);
  EXPECT_EQ(op.body[2]->kind, fb::FusedStepKind::Cast);
  EXPECT_EQ(op.body[2]->dtype, fb::DType::FP8E4M3);
  EXPECT_EQ(op.body[2]->fp8_scale_exp, 4);
  EXPECT_EQ(op.origin, (std::vector<uint32_t>{0, 1, 2}));
  int accepted = 0;
  for (const auto& d : f.decisions) {
    if (d.outcome != fb::Outcome::Accepted) continue;
    ++accepted;
    EXPECT_LT(d.cycles_after, d.cycles_before);
  }
  EXPECT_EQ(accepted, 2);
  // The last region's reason names its kernels: the cast folded in.
  bool folded = false;
  for (const auto& d : f.decisions) {
    folded |= d.reason.find("as bias_gelu:") != std::string::npos &&
              d.reason.find("cast") != std::string::npos;
  }
  EXPECT_TRUE(folded);
}

// A producer with two consumers: fusing it into one of them keeps it for
// the other and computes it twice; on small tiles that costs more.
TEST(FuseElementwiseTest, RefusesDuplicatingAProducerThatDoesNotPay) {
  Builder b;
  const uint32_t x = b.Value("x", {16, 64}, fb::ValueRole::Input);
  const uint32_t bias = b.Value("bias", {64}, fb::ValueRole::Weight);
  const uint32_t h = b.Value("h", {16, 64}, fb::ValueRole::Activation);
  const uint32_t g = b.Value("g", {16, 64}, fb::ValueRole::Output);
  const uint32_t s = b.Value("s", {16, 64}, fb::ValueRole::Output);
  b.Op(fb::OpKind::BiasAdd, "bias", {x, bias}, h);
  b.Op(fb::OpKind::Gelu, "gelu", {h}, g);
  b.Op(fb::OpKind::Add, "add", {h, x}, s);
  Fused f = RunFuse(Planned(std::move(b.m)));
  EXPECT_FALSE(f.changed);
  int refused = 0;
  for (const auto& d : f.decisions) {
    if (d.outcome != fb::Outcome::Rejected) continue;
    ++refused;
    EXPECT_NE(d.reason.find("computed twice"), std::string::npos) << d.reason;
    EXPECT_GT(d.cycles_after, d.cycles_before) << d.reason;
  }
  EXPECT_EQ(refused, 2);
}

// The ViT MLP block shrunk to [10, 48] x [48, 96] with the bias add on
// blocked(10x1) and GELU on flat grains: a redistribution between them.
fb::ModuleT Forced() {
  return Planned(
      lower::testing::Import("vit-b16-224", "mlp-block", "tiny", 10, 48, 96, 3),
      "op 1: gemm m=2 k=3 n=2 staging=streamed chunk_k=16\n"
      "op 2: elementwise blocked(10x1)\n"
      "op 3: elementwise flat(grain=4, tiles=16)\n"
      "op 4: gemm m=2 k=2 n=3 staging=batched(2) chunk_k=16\n");
}

const fb::DecisionT* AcceptedFusion(const Fused& f) {
  for (const auto& d : f.decisions) {
    if (d.outcome == fb::Outcome::Accepted && d.action.rfind("fuse", 0) == 0) {
      return &d;
    }
  }
  return nullptr;
}

TEST(FuseElementwiseTest, EachPlacementAcrossARedistribution) {
  const fb::ModuleT planned = Forced();
  ASSERT_EQ(Count(planned, fb::OpKind::Redistribute) >= 1, true);
  struct Case {
    FuseOptions options;
    const char* label;
  };
  FuseOptions producer{true, false, false}, consumer{false, true, false};
  for (const Case& c : {Case{producer, "fused on producer owners"},
                        Case{consumer, "fused on consumer owners"}}) {
    Fused f = RunFuse(planned, c.options);
    const fb::DecisionT* d = AcceptedFusion(f);
    ASSERT_NE(d, nullptr) << c.label;
    EXPECT_NE(d->reason.find(c.label), std::string::npos) << d->reason;
    EXPECT_NE(d->reason.find("different owners"), std::string::npos);
  }
  // All placements: the chosen one is the cheapest of them, so no
  // restricted run beats it.
  Fused all = RunFuse(planned);
  const fb::DecisionT* best = AcceptedFusion(all);
  ASSERT_NE(best, nullptr);
  for (FuseOptions o : {producer, consumer}) {
    const fb::DecisionT* d = AcceptedFusion(RunFuse(planned, o));
    ASSERT_NE(d, nullptr);
    EXPECT_LE(best->cycles_after, d->cycles_after);
  }
}

// Forced() with 4 KiB for tensors beside a 1 KiB runtime, in 1 KiB
// elements (the target validator wants the runtime inside the standard
// elements).
fb::ModuleT ForcedInFewBytes() {
  fb::ModuleT planned = Forced();
  planned.target->runtime_code_bytes = 1024;
  planned.target->sram_bytes = 1024 + 4096;
  planned.target->element_bytes = 1024;
  planned.target->interleaved_element_bytes = 1024;
  return planned;
}

// Tile memory shrunk below what any placement needs: the cheaper fused
// plans are refused by memory, naming the tile and its buffers.
TEST(FuseElementwiseTest, RefusesPlacementsThatDoNotFit) {
  Fused f = RunFuse(ForcedInFewBytes());
  EXPECT_FALSE(f.changed);
  bool refused = false;
  for (const auto& d : f.decisions) {
    if (d.ops.size() < 2 || d.ops[0] != 2 || d.ops[1] != 3) continue;
    EXPECT_EQ(d.outcome, fb::Outcome::Rejected);
    EXPECT_NE(d.reason.find("refused by memory"), std::string::npos)
        << d.reason;
    EXPECT_NE(d.reason.find("tile "), std::string::npos) << d.reason;
    EXPECT_LT(d.cycles_after, d.cycles_before);
    refused = true;
  }
  EXPECT_TRUE(refused);
}

TEST(FuseElementwiseTest, MaxDecisionsKeepsTheModule) {
  const fb::ModuleT planned = Forced();
  passes::PassOptions common;
  common.max_decisions = 0;
  Fused f = RunFuse(planned, {}, common);
  EXPECT_FALSE(f.changed);
  EXPECT_EQ(f.module.ops.size(), planned.ops.size());
  ASSERT_FALSE(f.decisions.empty());
  EXPECT_NE(f.decisions[0].reason.find("--max-decisions"), std::string::npos);
}

// The plan read back prices as the planner wrote it.
TEST(FuseElementwiseTest, UnplanKeepsThePlansPrice) {
  const fb::ModuleT planned = Forced();
  int64_t written = 0;
  for (const auto& op : planned.ops) written += op->estimate->cycles;
  StatusOr<PlannedGraph> pg = Unplan(planned);
  ASSERT_TRUE(pg.ok()) << pg.status().message();
  EXPECT_EQ(Count(pg->module, fb::OpKind::Redistribute), 0);
  StatusOr<plan::Graph> graph = plan::Graph::Build(pg->module);
  ASSERT_TRUE(graph.ok());
  StatusOr<plan::Coster> coster =
      plan::Coster::Create(*planned.target, plan::PriceOptions{});
  ASSERT_TRUE(coster.ok());
  StatusOr<plan::Evaluation> e =
      plan::Evaluate(*graph, *coster, pg->plan, plan::EvalMode::kFull);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->total_cycles, written);
}

// Row copies read their weights where they are: read back, a weight owned
// as its copy's layout has no home, one owned otherwise is in its home, and
// the plan prices as the planner wrote it.
TEST(FuseElementwiseTest, UnplanKeepsARowCopiedWeightsHome) {
  fb::ModuleT planned = Planned(plan::RowMovementModule("tiny", 3, 5, 32, 24));
  int64_t written = 0;
  for (const auto& op : planned.ops) written += op->estimate->cycles;
  {
    StatusOr<PlannedGraph> pg = Unplan(planned);
    ASSERT_TRUE(pg.ok()) << pg.status().message();
    EXPECT_TRUE(pg->plan.homes.empty());
    StatusOr<plan::Graph> graph = plan::Graph::Build(pg->module);
    ASSERT_TRUE(graph.ok()) << graph.status().message();
    StatusOr<plan::Coster> coster =
        plan::Coster::Create(*planned.target, plan::PriceOptions{});
    ASSERT_TRUE(coster.ok());
    StatusOr<plan::Evaluation> e =
        plan::Evaluate(*graph, *coster, pg->plan, plan::EvalMode::kFull);
    ASSERT_TRUE(e.ok()) << e.status().message();
    EXPECT_EQ(e->total_cycles, written);
  }
  // The class token (value 1) moved to a home of its own on tile 7.
  const fb::OwnershipT home = passes::BlockedOwnership({1, 1}, 1, 7);
  *planned.values[1]->ownership = home;
  StatusOr<PlannedGraph> pg = Unplan(planned);
  ASSERT_TRUE(pg.ok()) << pg.status().message();
  ASSERT_EQ(pg->plan.homes.size(), pg->module.values.size());
  ASSERT_NE(pg->plan.Home(1), nullptr);
  EXPECT_TRUE(passes::SameOwnership(pg->plan.Home(1)->fixed, home));
  EXPECT_EQ(pg->plan.Home(2), nullptr);
}

TEST(FuseElementwiseTest, ResidualOperandInSlotOneIsRemapped) {
  Builder b;
  const uint32_t x = b.Value("x", {16, 64}, fb::ValueRole::Input);
  const uint32_t bias = b.Value("bias", {64}, fb::ValueRole::Weight);
  const uint32_t h = b.Value("h", {16, 64}, fb::ValueRole::Activation);
  const uint32_t s = b.Value("s", {16, 64}, fb::ValueRole::Output);
  b.Op(fb::OpKind::BiasAdd, "l.bias", {x, bias}, h);
  b.Op(fb::OpKind::Add, "l.residual", {x, h}, s);
  Region r;
  r.producer = 0;
  r.consumer = 1;
  r.slot = 1;
  StatusOr<fb::ModuleT> m = FuseRegion(b.m, r, 9);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->ops.size(), 1u);
  const fb::OperationT& op = *m->ops[0];
  EXPECT_EQ(op.name, "l.bias+residual");
  EXPECT_EQ(op.operands, (std::vector<uint32_t>{x, bias, x}));
  ASSERT_EQ(op.body.size(), 2u);
  EXPECT_EQ(op.body[1]->kind, fb::FusedStepKind::ResidualAdd);
  EXPECT_EQ(op.body[1]->operand, 2);
  EXPECT_EQ(m->values.size(), 3u);  // h is gone
}

// LayerScale after a bias: the general step fuses like any other, its
// operand renumbered after the producer's, and the pass prices the fused
// body as the calls CompileBody makes (bias_add + binary_row: there is no
// combined kernel, so fusing saves no call).
TEST(FuseElementwiseTest, GeneralStepsFuseAndArePricedAsTheirKernels) {
  Builder b;
  const uint32_t x = b.Value("x", {16, 64}, fb::ValueRole::Input);
  const uint32_t bias = b.Value("bias", {64}, fb::ValueRole::Weight);
  const uint32_t gamma = b.Value("gamma", {64}, fb::ValueRole::Weight);
  const uint32_t h = b.Value("h", {16, 64}, fb::ValueRole::Activation);
  const uint32_t s = b.Value("s", {16, 64}, fb::ValueRole::Output);
  b.Op(fb::OpKind::BiasAdd, "l.bias", {x, bias}, h);
  b.Op(fb::OpKind::Fused, "l.scale", {h, gamma}, s);
  auto step = std::make_unique<fb::FusedStepT>();
  step->kind = fb::FusedStepKind::Binary;
  step->fn = fb::ElementwiseFn::Mul;
  step->operand = 1;
  step->broadcast = fb::Broadcast::Row;
  b.m.ops[1]->body.push_back(std::move(step));
  Region r;
  r.producer = 0;
  r.consumer = 1;
  r.slot = 0;
  StatusOr<fb::ModuleT> m = FuseRegion(b.m, r, 9);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->ops.size(), 1u);
  const fb::OperationT& op = *m->ops[0];
  EXPECT_EQ(op.operands, (std::vector<uint32_t>{x, bias, gamma}));
  ASSERT_EQ(op.body.size(), 2u);
  EXPECT_EQ(op.body[1]->kind, fb::FusedStepKind::Binary);
  EXPECT_EQ(op.body[1]->operand, 2);
  EXPECT_EQ(op.body[1]->broadcast, fb::Broadcast::Row);

  const Fused fused = RunFuse(Planned(b.m));
  bool priced = false;
  for (const fb::DecisionT& d : fused.decisions) {
    priced |= d.reason.find("bias_add+binary_row") != std::string::npos;
  }
  EXPECT_TRUE(priced);
}

// A round's candidate regions are priced on the threads: the module and
// every decision (one fusion, three refusals in candidate order on this
// layer) are those of one thread.
TEST(FuseElementwiseTest, ThreadCountChangesNoOutputByte) {
  const fb::ModuleT planned = Planned(lower::testing::Import(
      "vit-b16-224", "layer", "tiny", 64, 96, 384, 3));
  std::vector<std::string> bytes;
  for (int threads : {1, 2, 3}) {
    FuseOptions options;
    options.threads = threads;
    Fused fused = RunFuse(planned, options);
    EXPECT_TRUE(fused.changed);
    bytes.emplace_back();
    ASSERT_TRUE(ir::SerializeModule(fused.module, "test", &bytes.back()).ok());
  }
  EXPECT_EQ(bytes[1], bytes[0]);
  EXPECT_EQ(bytes[2], bytes[0]);
}

TEST(FuseElementwiseTest, RefusesStagesOtherThanPlanned) {
  fb::ModuleT unplanned =
      lower::testing::Import("vit-b16-224", "mlp-block", "tiny", 10, 48, 96, 3);
  FuseElementwisePass pass;
  StatusOr<bool> ran = pass.Run(&unplanned);
  ASSERT_FALSE(ran.ok());
  EXPECT_EQ(ran.status().code(), StatusCode::kBadInput);
  EXPECT_NE(ran.status().message().find("unplanned graph"), std::string::npos);
}

// ---------------------------------------------------------------- end to end

struct Compiled {
  fb::ModuleT module;
  lower::testing::SimCheck check;
  int64_t predicted = 0;
};

// The default pipeline; with `fuse` false both fusion passes apply no
// decision (--max-decisions=0), which leaves the module as it was.
Compiled Compile(fb::ModuleT m, const std::string& recipe, bool fuse) {
  plan::PlannerOptions po;
  po.attempts = 16;
  po.recipe_text = recipe;
  po.recipe_name = "test.recipe";
  Status s = passes::RunPipeline(
      &m, [&](std::string_view name) -> std::unique_ptr<passes::Pass> {
        if (name == "plan-ownership") {
          return std::make_unique<plan::PlanOwnershipPass>(po);
        }
        // Pinned recipes are written for the graph's own dtypes (chunk_k=16
        // is F16's K granule): those cases run the F16 pipeline.
        if (name == "quantize-fp8" && !recipe.empty()) {
          return quantize::KeepDTypesPass();
        }
        passes::PassOptions off;
        off.max_decisions = 0;
        if (!fuse && name == "fuse-elementwise") {
          return std::make_unique<FuseElementwisePass>(FuseOptions{}, off);
        }
        if (!fuse && name == "fuse-residual") {
          return std::make_unique<FuseResidualPass>(off);
        }
        return nullptr;
      });
  EXPECT_TRUE(s.ok()) << s.message();
  Compiled out;
  out.predicted = lower::testing::ProgramFiguresOf(m).predicted;
  s = lower::testing::SimulateAgainstReference(
      m, sim::Tolerance{2e-2, 1e-2, 0.9999}, &out.check);
  EXPECT_TRUE(s.ok()) << s.message();
  out.module = std::move(m);
  return out;
}

void ExpectFusedLikeUnfused(const fb::ModuleT& graph,
                            const std::string& recipe, int min_fused) {
  Compiled fused = Compile(graph, recipe, true);
  Compiled unfused = Compile(graph, recipe, false);
  EXPECT_GE(Count(fused.module, fb::OpKind::Fused), min_fused);
  EXPECT_EQ(Count(unfused.module, fb::OpKind::Fused), 0);
  EXPECT_TRUE(fused.check.pass) << fused.check.message;
  EXPECT_TRUE(unfused.check.pass) << unfused.check.message;
  EXPECT_EQ(fused.check.result.total_cycles, fused.predicted);
  EXPECT_EQ(unfused.check.result.total_cycles, unfused.predicted);
  // Every fused op's body is priced (by the planner, through
  // kernels/fused_body.h) as the simulator charges the calls the lowering
  // made of it: the check that would have caught residual_moments priced
  // as add + ln_moments.
  for (const auto& op : fused.module.ops) {
    if (op->kind != fb::OpKind::Fused) continue;
    ASSERT_NE(op->estimate, nullptr);
    bool seen = false;
    for (const sim::OpReport& r : fused.check.result.ops) {
      if (r.op != op->id) continue;
      seen = true;
      EXPECT_EQ(r.compute_cycles, op->estimate->compute_cycles) << op->name;
    }
    EXPECT_TRUE(seen) << op->name;
  }
  // Never slower than without fusion.
  EXPECT_LE(fused.check.result.total_cycles,
            unfused.check.result.total_cycles);
  std::printf("fused %lld cycles (max_abs_err %g), unfused %lld (%g)\n",
              static_cast<long long>(fused.check.result.total_cycles),
              fused.check.max_abs_err,
              static_cast<long long>(unfused.check.result.total_cycles),
              unfused.check.max_abs_err);
}

TEST(FuseEndToEndTest, ForcedPlanFusesAcrossItsRedistribution) {
  ExpectFusedLikeUnfused(
      lower::testing::Import("vit-b16-224", "mlp-block", "tiny", 10, 48, 96, 3),
      "op 1: gemm m=2 k=3 n=2 staging=streamed chunk_k=16\n"
      "op 2: elementwise blocked(10x1)\n"
      "op 3: elementwise flat(grain=4, tiles=16)\n"
      "op 4: gemm m=2 k=2 n=3 staging=batched(2) chunk_k=16\n",
      1);
}

TEST(FuseEndToEndTest, SearchedPlan) {
  ExpectFusedLikeUnfused(lower::testing::Import("vit-b16-224", "mlp-block",
                                                "tiny", 64, 96, 384, 3),
                         "", 1);
}

TEST(FuseEndToEndTest, TwoMlpBlocks) {
  passes::ModelOverrides o = plan::TinyOverrides(64, 4);
  o.layers = 2;
  fb::ModuleT m = plan::Model("tiny", "vit-b16-224", o);
  Compiled fused = Compile(m, "", true);
  // fuse-residual decided the one residual -> LayerNorm site by cost and
  // logged both numbers.
  bool logged = false;
  for (const auto& run : fused.module.log) {
    if (run->pass != "fuse-residual") continue;
    for (const auto& d : run->decisions) {
      logged |= d->reason.find("before ") != std::string::npos &&
                d->reason.find(", after ") != std::string::npos;
    }
  }
  EXPECT_TRUE(logged);
  // On this shape the statistics fusion pays: the LayerNorm became a
  // Normalize of the sum.
  EXPECT_EQ(Count(fused.module, fb::OpKind::Normalize), 1);
  // fuse-elementwise after fuse-residual passes the module through (the
  // planner cannot price what fuse-residual made).
  fb::ModuleT again = Planned(m);
  ASSERT_TRUE(FuseElementwisePass().Run(&again).ok());
  StatusOr<bool> residual = FuseResidualPass().Run(&again);
  ASSERT_TRUE(residual.ok() && *residual);
  StatusOr<bool> twice = FuseElementwisePass().Run(&again);
  ASSERT_TRUE(twice.ok()) << twice.status().message();
  EXPECT_FALSE(*twice);
  EXPECT_EQ(again.log.back()->decisions.back()->action, "skip");
  ExpectFusedLikeUnfused(m, "", 1);
}


// A LayerNorm over column slices of its rows takes its statistics from the
// residual add too: each row block's moments on every slice of it.
TEST(FuseEndToEndTest, SplitLayerNormTakesTheResidualsStatistics) {
  passes::ModelOverrides o = plan::TinyOverrides(64, 4);
  o.layers = 2;
  const fb::ModuleT m = plan::Model("tiny", "vit-b16-224", o);
  const std::string recipe = "op 7: rowwise blocked(8x2)\n";
  Compiled fused = Compile(m, recipe, true);
  ASSERT_EQ(Count(fused.module, fb::OpKind::Normalize), 1);
  for (const auto& op : fused.module.ops) {
    if (op->kind != fb::OpKind::Normalize) continue;
    for (const auto& v : fused.module.values) {
      if (v->id != op->operands[1]) continue;
      EXPECT_EQ(ir::OwnershipText(*v->ownership), "blocked(8x1, rep=2)");
    }
  }
  ExpectFusedLikeUnfused(m, recipe, 1);
}


// ---------------------------------------------------------------- repeats

fb::ModuleT RolledBlocks(int layers, int64_t tokens = 64) {
  return plan::TinyBlocks(layers, true, tokens);
}

// The repeat as it was: same count, carried values and weights, and a body
// the rules accept.
void ExpectRepeatKept(const fb::ModuleT& before, const fb::ModuleT& after) {
  const Status verified = ir::VerifyModule(after);
  ASSERT_TRUE(verified.ok()) << verified.message();
  ASSERT_EQ(after.repeats.size(), 1u);
  const fb::RepeatT& a = *before.repeats[0];
  const fb::RepeatT& b = *after.repeats[0];
  EXPECT_EQ(a.count, b.count);
  EXPECT_EQ(a.carried_in, b.carried_in);
  EXPECT_EQ(a.carried_out, b.carried_out);
  EXPECT_EQ(a.weights, b.weights);
  EXPECT_EQ(a.iteration_weights, b.iteration_weights);
}

// Inside the body regions fuse as anywhere; the body stays one repeat.
TEST(FuseRepeatTest, FusesInsideTheBody) {
  const fb::ModuleT planned = Planned(RolledBlocks(3));
  Fused f = RunFuse(planned);
  EXPECT_TRUE(f.changed);
  ExpectRepeatKept(planned, f.module);
  StatusOr<std::vector<ir::RepeatBody>> bodies = ir::RepeatBodies(f.module);
  ASSERT_TRUE(bodies.ok());
  for (size_t i = 0; i < f.module.ops.size(); ++i) {
    if (f.module.ops[i]->kind == fb::OpKind::Fused) {
      EXPECT_TRUE((*bodies)[0].Contains(i)) << f.module.ops[i]->name;
    }
  }
}

// The body's last op and an elementwise op after it are not a region.
TEST(FuseRepeatTest, NothingFusesAcrossTheBoundary) {
  const fb::ModuleT m = plan::WithOpAfterBody(RolledBlocks(3), fb::OpKind::Gelu);
  bool refused = false;
  for (const auto& [region, why] : RegionCandidates(m)) {
    if (m.ops[region.consumer]->name != "final.gelu") continue;
    refused = why.find("across the loop's boundary") != std::string::npos;
  }
  EXPECT_TRUE(refused);
  const fb::ModuleT planned = Planned(m);
  Fused f = RunFuse(planned);
  ExpectRepeatKept(planned, f.module);
  EXPECT_NE(OpOfKind(f.module, fb::OpKind::Gelu), nullptr);
}

std::string OwnershipOf(const fb::ModuleT& m, uint32_t id) {
  for (const auto& v : m.values) {
    if (v->id == id && v->ownership) return ir::OwnershipText(*v->ownership);
  }
  return "none";
}

// A plan with a loop edge (the residual add owned otherwise than the
// block's input). Fused on the consumers' owners the add stays so: the edge
// stays the body's last op, with its id; fused freely, the region takes the
// input's owners and the plan needs no edge. Either way the next iteration
// finds carried_out as iteration 0 found carried_in.
TEST(FuseRepeatTest, KeepsOrDropsTheLoopEdge) {
  const fb::ModuleT planned =
      Planned(RolledBlocks(3, 16), "op 6: elementwise blocked(2x8)\n");
  const fb::RepeatT& r = *planned.repeats[0];
  const fb::OperationT* edge = nullptr;
  for (const auto& op : planned.ops) {
    if (op->kind == fb::OpKind::Redistribute &&
        op->results[0] == r.carried_out) {
      edge = op.get();
    }
  }
  ASSERT_NE(edge, nullptr);
  StatusOr<PlannedGraph> pg = Unplan(planned);
  ASSERT_TRUE(pg.ok()) << pg.status().message();
  EXPECT_TRUE(ir::VerifyModule(pg->module).ok());

  FuseOptions consumer_owners;
  consumer_owners.producer_owners = false;
  consumer_owners.proposals = false;
  Fused kept = RunFuse(planned, consumer_owners);
  EXPECT_TRUE(kept.changed);
  ExpectRepeatKept(planned, kept.module);
  StatusOr<std::vector<ir::RepeatBody>> bodies = ir::RepeatBodies(kept.module);
  ASSERT_TRUE(bodies.ok());
  const fb::OperationT& last = *kept.module.ops[(*bodies)[0].end - 1];
  EXPECT_EQ(last.kind, fb::OpKind::Redistribute);
  EXPECT_EQ(last.id, edge->id);

  Fused free = RunFuse(planned);
  ExpectRepeatKept(planned, free.module);
  for (const fb::ModuleT* m : {&kept.module, &free.module}) {
    EXPECT_EQ(OwnershipOf(*m, r.carried_out), OwnershipOf(*m, r.carried_in));
  }
}

// fuse-residual: the body's last residual add and a LayerNorm after the
// body are not fused (the moments would leave the body); written out, the
// same site is decided by cost.
TEST(FuseRepeatTest, ResidualStaysInsideTheBody) {
  const fb::ModuleT planned =
      Planned(plan::WithOpAfterBody(RolledBlocks(2), fb::OpKind::LayerNorm));
  fb::ModuleT m = planned;
  StatusOr<bool> ran = FuseResidualPass().Run(&m);
  ASSERT_TRUE(ran.ok()) << ran.status().message();
  EXPECT_FALSE(*ran);
  ExpectRepeatKept(planned, m);
  EXPECT_EQ(Count(m, fb::OpKind::Normalize), 0);
  bool boundary = false;
  for (const auto& d : m.log.back()->decisions) {
    boundary |= d->reason.find("across the loop's boundary") !=
                std::string::npos;
  }
  EXPECT_TRUE(boundary);
}

// Placements evaluated in full only where their lower bounds could make
// them the cheapest (of all, of their label, or a cheaper one that does
// not fit) give the module and decisions of evaluating every placement: on
// a layer, a repeat of three blocks, and where tile memory refuses the
// cheaper placements.
TEST(FuseElementwiseTest, BoundsFirstChangesNoOutputByte) {
  const fb::ModuleT modules[] = {
      Planned(lower::testing::Import("vit-b16-224", "layer", "tiny", 64, 96,
                                     384, 3)),
      Planned(RolledBlocks(3)), Forced(), ForcedInFewBytes()};
  for (const fb::ModuleT& planned : modules) {
    std::vector<std::string> bytes;
    for (bool bounds_first : {false, true}) {
      FuseOptions options;
      options.bounds_first = bounds_first;
      Fused fused = RunFuse(planned, options);
      bytes.emplace_back();
      ASSERT_TRUE(
          ir::SerializeModule(fused.module, "test", &bytes.back()).ok());
    }
    EXPECT_EQ(bytes[1], bytes[0]);
  }
}

}  // namespace
}  // namespace tilec::fuse
