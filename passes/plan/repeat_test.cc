// Repeats in plan-ownership (docs/repeat.md): a rolled graph is planned once
// per body and priced as the whole model; twins take their body weight's
// ownership and count in memory; the loop edge gets a Redistribute when
// carried_out and carried_in are owned differently.

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "formats/ir.h"
#include "formats/print.h"
#include "formats/repeat.h"
#include "passes/core/ownership.h"
#include "passes/plan/cost.h"
#include "passes/plan/graph.h"
#include "passes/plan/plan.h"
#include "passes/plan/planner.h"
#include "passes/plan/search.h"
#include "passes/plan/test_modules.h"
#include "passes/plan/weight_homes.h"

namespace tilec::plan {
namespace {

fb::ModuleT Blocks(int layers, bool repeat, int64_t mlp_width = 128) {
  return TinyBlocks(layers, repeat, 16, mlp_width);
}

struct Fixture {
  explicit Fixture(fb::ModuleT m)
      : module(std::move(m)),
        graph(*Graph::Build(module)),
        coster(*Coster::Create(*module.target, {})) {}
  fb::ModuleT module;
  Graph graph;
  Coster coster;
};

// The search's initial plan (and its evaluation), with `pinned` recipes.
struct Planned {
  Plan plan;
  Evaluation eval;
};
StatusOr<Planned> InitialPlan(const Fixture& f,
                              std::map<int, Recipe> pinned = {}) {
  SearchOptions options;
  options.pinned = std::move(pinned);
  Search search(f.graph, f.coster, std::move(options));
  TILEC_RETURN_IF_ERROR(search.Initialize());
  return Planned{search.incumbent(), search.evaluation()};
}

std::string OwnershipOf(const fb::ModuleT& m, uint32_t id) {
  for (const auto& v : m.values) {
    if (v->id == id) {
      return v->ownership ? passes::FormatOwnership(*v->ownership) : "none";
    }
  }
  return "missing";
}

TEST(RepeatPlanTest, GraphKnowsBodiesAndTwins) {
  Fixture f(Blocks(3, true));
  ASSERT_EQ(f.graph.repeats().size(), 1u);
  const RepeatNode& r = f.graph.repeats()[0];
  EXPECT_EQ(r.begin, 0);
  EXPECT_EQ(r.end, 7);
  EXPECT_EQ(r.count, 3);
  EXPECT_EQ(r.weights.size(), 6u);
  for (int op = 0; op < f.graph.num_ops(); ++op) EXPECT_EQ(f.graph.Runs(op), 3);
  int twins = 0;
  for (int v = 0; v < f.graph.num_values(); ++v) {
    if (f.graph.TwinOf(v) < 0) continue;
    ++twins;
    EXPECT_EQ(f.coster.StoredBytes(f.graph, v),
              f.coster.StoredBytes(f.graph, f.graph.TwinOf(v)));
  }
  EXPECT_EQ(twins, 12);
  for (int w : r.weights) EXPECT_EQ(f.graph.Copies(w), 3);
  // The repeat is part of the graph's identity (checkpoints).
  Fixture written(Blocks(3, false));
  EXPECT_NE(f.graph.Fingerprint(), written.graph.Fingerprint());
}

// The rolled plan costs what the same recipes cost written out: body x 3,
// with the same peak (the twins are the later layers' weights).
TEST(RepeatPlanTest, RolledTotalIsBodyTimesCount) {
  Fixture rolled(Blocks(3, true));
  StatusOr<Planned> p = InitialPlan(rolled);
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->eval.repeat_cycles.size(), 1u);
  EXPECT_EQ(p->eval.total_cycles, 3 * p->eval.repeat_cycles[0]);

  Fixture written(Blocks(3, false));
  ASSERT_EQ(written.graph.num_ops(), 3 * rolled.graph.num_ops());
  Plan same;
  for (int op = 0; op < written.graph.num_ops(); ++op) {
    same.recipes.push_back(p->plan.recipes[op % rolled.graph.num_ops()]);
  }
  StatusOr<Evaluation> w =
      Evaluate(written.graph, written.coster, same, EvalMode::kFull);
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_EQ(p->eval.total_cycles, w->total_cycles);
  EXPECT_EQ(p->eval.peak_bytes, w->peak_bytes);
  // Each op's estimate stays one iteration's.
  EXPECT_EQ(p->eval.ops[1].Cycles(), w->ops[8].Cycles());
}

// Ops after the body count once: the total is body x count + the rest.
TEST(RepeatPlanTest, RestAfterTheBodyCountsOnce) {
  Fixture f(WithOpAfterBody(Blocks(3, true), fb::OpKind::LayerNorm));
  StatusOr<Planned> p = InitialPlan(f);
  ASSERT_TRUE(p.ok()) << p.status().message();
  const int last = f.graph.num_ops() - 1;
  EXPECT_EQ(f.graph.Runs(last), 1);
  int64_t rest = p->eval.ops[last].Cycles();
  for (const Redistribution& red : p->eval.redistributions) {
    if (red.before_op == last && !red.loop_edge) rest += red.Cycles();
  }
  EXPECT_GT(rest, 0);
  EXPECT_EQ(p->eval.total_cycles, 3 * p->eval.repeat_cycles[0] + rest);
  fb::ModuleT out = f.module;
  ASSERT_TRUE(WritePlan(f.graph, f.coster, p->plan, p->eval, "", &out).ok());
  EXPECT_TRUE(ir::VerifyModule(out).ok());
}

// Twins are live for the whole program in their body weight's ownership.
TEST(RepeatPlanTest, TwinsTakeOwnershipAndCountInPeak) {
  Fixture rolled(Blocks(3, true));
  StatusOr<Planned> p = InitialPlan(rolled);
  ASSERT_TRUE(p.ok()) << p.status().message();
  bool twin_at_peak = false;
  for (const MemoryItem& item : p->eval.peak_items) {
    twin_at_peak |= item.what.find("twin of %") != std::string::npos;
  }
  EXPECT_TRUE(twin_at_peak);
  // One layer with the same recipes: the peak without the twins.
  Fixture one(Blocks(1, false));
  Plan same = p->plan;
  StatusOr<Evaluation> single =
      Evaluate(one.graph, one.coster, same, EvalMode::kFull);
  ASSERT_TRUE(single.ok()) << single.status().message();
  EXPECT_GT(p->eval.peak_bytes, single->peak_bytes);

  fb::ModuleT out = rolled.module;
  ASSERT_TRUE(
      WritePlan(rolled.graph, rolled.coster, p->plan, p->eval, "", &out).ok());
  const Status verified = ir::VerifyModule(out);
  EXPECT_TRUE(verified.ok()) << verified.message();
  const fb::RepeatT& r = *out.repeats[0];
  for (size_t k = 0; k < r.iteration_weights.size(); ++k) {
    const uint32_t body = r.weights[k % r.weights.size()];
    EXPECT_NE(OwnershipOf(out, body), "none");
    EXPECT_EQ(OwnershipOf(out, r.iteration_weights[k]), OwnershipOf(out, body));
  }
}

// Thirteen blocks' weights fit only in homes (fourteen no longer fit beside
// the code's element and the sixteenth of the tensor memory kept for
// placing buffers): the rolled model plans with its
// body weights (and so every twin) in homes, promotions pricing every copy.
TEST(RepeatPlanTest, RolledWeightsFitInHomes) {
  Fixture f(Blocks(13, true, 256));
  passes::DecisionLog log("plan-ownership");
  SearchOptions options;
  options.log = &log;
  Search search(f.graph, f.coster, std::move(options));
  const Status s = search.Initialize();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(search.evaluation().feasible());
  EXPECT_GT(CountHomes(f.graph, search.incumbent()), 0);
  bool homes = false, copies = false;
  for (const auto& d : log.decisions()) {
    homes |= d->action.rfind("every weight to a home", 0) == 0 &&
             d->outcome == fb::Outcome::Accepted;
    copies |= d->action.find("13 iterations' copies") != std::string::npos;
  }
  EXPECT_TRUE(homes);
  EXPECT_TRUE(copies);
  const Evaluation& e = search.evaluation();
  for (int v = 0; v < f.graph.num_values(); ++v) {
    const int w = f.graph.TwinOf(v);
    if (w < 0) continue;
    ASSERT_TRUE(e.owned[v]);
    EXPECT_EQ(passes::FormatOwnership(OwnershipOf(f.graph, e, v)),
              passes::FormatOwnership(e.owners[w]));
  }
}

// Nineteen blocks' weights do not fit even once each over the tiles: exit 3
// naming the weights, twins among them.
TEST(RepeatPlanTest, TwinsThatCannotFitAreInfeasible) {
  Fixture f(Blocks(19, true, 256));
  Search search(f.graph, f.coster, {});
  const Status s = search.Initialize();
  ASSERT_EQ(s.code(), StatusCode::kInfeasible) << s.message();
  EXPECT_NE(s.message().find("the weights alone need at least"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("twins (later iterations' weights)"),
            std::string::npos)
      << s.message();
}

// An add owned otherwise than the block's input: the loop edge moves
// carried_out to carried_in's ownership at the end of every iteration, as
// the body's last op.
TEST(RepeatPlanTest, LoopEdgeGetsARedistribute) {
  Fixture f(Blocks(3, true));
  StatusOr<Recipe> add = ParseRecipe("elementwise blocked(2x8)");
  ASSERT_TRUE(add.ok());
  StatusOr<Planned> p = InitialPlan(f, {{6, *add}});
  ASSERT_TRUE(p.ok()) << p.status().message();
  const Evaluation& e = p->eval;
  ASSERT_GE(e.loop_edges[0], 0);
  const Redistribution& edge = e.redistributions[e.loop_edges[0]];
  EXPECT_TRUE(edge.loop_edge);
  EXPECT_EQ(edge.runs, 3);
  EXPECT_EQ(passes::FormatOwnership(edge.to), "blocked(16x1)");
  EXPECT_GT(edge.Cycles(), 0);
  EXPECT_EQ(e.total_cycles, 3 * e.repeat_cycles[0]);

  fb::ModuleT out = f.module;
  const uint32_t carried_out = out.repeats[0]->carried_out;
  StatusOr<std::vector<uint32_t>> inserted =
      WritePlan(f.graph, f.coster, p->plan, e, "", &out);
  ASSERT_TRUE(inserted.ok());
  const Status verified = ir::VerifyModule(out);
  ASSERT_TRUE(verified.ok()) << verified.message();
  StatusOr<std::vector<ir::RepeatBody>> bodies = ir::RepeatBodies(out);
  ASSERT_TRUE(bodies.ok());
  const fb::OperationT& last = *out.ops[(*bodies)[0].end - 1];
  EXPECT_EQ(last.kind, fb::OpKind::Redistribute);
  EXPECT_EQ(last.results[0], out.repeats[0]->carried_out);
  EXPECT_EQ(out.repeats[0]->carried_out, carried_out);  // still the output
  EXPECT_EQ(OwnershipOf(out, carried_out),
            OwnershipOf(out, out.repeats[0]->carried_in));
  EXPECT_EQ(OwnershipOf(out, last.operands[0]), "blocked(2x8)");
}

// Without a difference there is no edge.
TEST(RepeatPlanTest, NoLoopEdgeWhenOwnershipsAgree) {
  Fixture f(Blocks(3, true));
  StatusOr<Planned> p = InitialPlan(f);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->eval.loop_edges[0], -1);
}

TEST(RepeatPlanTest, PassSummarizesTheRepeat) {
  fb::ModuleT m = Blocks(3, true);
  std::ostringstream messages;
  passes::PassOptions common;
  common.messages = &messages;
  StatusOr<bool> ran = PlanOwnershipPass({}, common).Run(&m);
  ASSERT_TRUE(ran.ok()) << ran.status().message();
  EXPECT_NE(messages.str().find("repeat: 7 body ops planned once for 3 "
                                "iterations: "),
            std::string::npos)
      << messages.str();
  bool info = false;
  for (const auto& d : m.log.back()->decisions) {
    info |= d->action.rfind("repeat: 7 body ops planned once", 0) == 0 &&
            d->outcome == fb::Outcome::Info;
  }
  EXPECT_TRUE(info);
  EXPECT_TRUE(ir::VerifyModule(m).ok());
}

}  // namespace
}  // namespace tilec::plan
