#include "passes/plan/attention_steps.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "formats/ir.h"
#include "passes/core/pass.h"
#include "passes/plan/cost.h"
#include "passes/plan/planner.h"
#include "passes/plan/test_modules.h"
#include "sim/reference.h"

namespace tilec::plan {
namespace {

// A SigLIP layer on the tiny target: `images` images of `tokens` tokens,
// width 32 over 2 heads.
fb::ModuleT Layer(int64_t images, int64_t tokens) {
  passes::ModelOverrides o;
  o.batch = images;
  o.tokens = tokens;
  o.width = 32;
  o.mlp_width = 64;
  o.heads = 2;
  return Model("tiny", "siglip-so400m-384", o, "layer");
}

const fb::OperationT* FindOp(const fb::ModuleT& m, const std::string& name) {
  for (const auto& op : m.ops) {
    if (op->name == name) return op.get();
  }
  return nullptr;
}

TEST(AttentionStepsTest, FindsTheChainFromScoresToContext) {
  const fb::ModuleT m = Layer(4, 8);
  const std::vector<AttentionChain> chains = FindAttentionChains(m);
  ASSERT_EQ(chains.size(), 1u);
  std::vector<std::string> names;
  for (int op : chains[0].ops) names.push_back(m.ops[op]->name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "l0.attn.scores", "l0.attn.softmax", "l0.attn.ctx"}));
  EXPECT_EQ(chains[0].images, 4);
  EXPECT_EQ(AttentionStepCounts(m), (std::vector<int>{2, 4}));
  EXPECT_TRUE(AttentionStepCounts(Layer(1, 8)).empty());
}

TEST(AttentionStepsTest, EachStepReadsItsImagesAndAJoinMakesTheContext) {
  fb::ModuleT m = Layer(4, 8);
  const fb::OperationT& ctx = *FindOp(m, "l0.attn.ctx");
  const uint32_t scores_id = FindOp(m, "l0.attn.scores")->id,
                 context_value = ctx.results[0];
  ASSERT_TRUE(SplitAttentionIntoImageSteps(2, &m).ok());
  ASSERT_TRUE(ir::VerifyModule(m).ok()) << ir::VerifyModule(m).message();
  for (int s : {0, 1}) {
    const std::string step = ".step" + std::to_string(s);
    const fb::OperationT* scores = FindOp(m, "l0.attn.scores" + step);
    const fb::OperationT* context = FindOp(m, "l0.attn.ctx" + step);
    ASSERT_NE(scores, nullptr);
    ASSERT_NE(context, nullptr);
    EXPECT_EQ(scores->first_image, 2 * s);
    EXPECT_EQ(context->first_image, 2 * s);
    ASSERT_NE(FindOp(m, "l0.attn.softmax" + step), nullptr);
  }
  // Step 0 keeps the chain's op ids; the whole context is the join's.
  EXPECT_EQ(FindOp(m, "l0.attn.scores.step0")->id, scores_id);
  const fb::OperationT* join = FindOp(m, "l0.attn.ctx.join");
  ASSERT_NE(join, nullptr);
  EXPECT_EQ(join->kind, fb::OpKind::CopyRows);
  EXPECT_EQ(join->results[0], context_value);
  ASSERT_EQ(join->rows.size(), 2u);
  EXPECT_EQ(join->rows[1]->at, 2 * 8);
  // The ops run step after step, the join last.
  std::vector<std::string> order;
  for (const auto& op : m.ops) {
    if (op->name.rfind("l0.attn.", 0) == 0 &&
        op->name.find(".step") != std::string::npos) {
      order.push_back(op->name);
    }
  }
  EXPECT_EQ(order, (std::vector<std::string>{
                       "l0.attn.scores.step0", "l0.attn.softmax.step0",
                       "l0.attn.ctx.step0", "l0.attn.scores.step1",
                       "l0.attn.softmax.step1", "l0.attn.ctx.step1"}));
  const Status odd = SplitAttentionIntoImageSteps(3, &m);
  EXPECT_NE(odd.message().find("has 2 images, which 3 does not divide"),
            std::string::npos)
      << odd.message();
}

// The steps compute exactly what attention over every image at once does.
TEST(AttentionStepsTest, StepsComputeTheSameOutputBitForBit) {
  const fb::ModuleT whole = Layer(4, 8);
  kernels::ReferenceResult expected;
  ASSERT_TRUE(kernels::RunReference(whole, &expected).ok());
  for (int steps : {2, 4}) {
    fb::ModuleT split = whole;
    ASSERT_TRUE(SplitAttentionIntoImageSteps(steps, &split).ok());
    kernels::ReferenceResult got;
    ASSERT_TRUE(kernels::RunReference(split, &got).ok());
    ASSERT_EQ(got.Outputs().size(), 1u);
    EXPECT_EQ(got.Outputs()[0]->data, expected.Outputs()[0]->data)
        << steps << " steps";
    // So does the context each step writes into its rows.
    EXPECT_EQ(got.FindByName("l0.attn.ctx.out")->data,
              expected.FindByName("l0.attn.ctx.out")->data);
  }
}

// Steps of one shape read different rows of qkv: each is priced for its
// own images, not given the other's cached price.
TEST(AttentionStepsTest, EachStepIsPricedForItsOwnImages) {
  fb::ModuleT m = Layer(4, 8);
  ASSERT_TRUE(SplitAttentionIntoImageSteps(2, &m).ok());
  StatusOr<Graph> graph = Graph::Build(m);
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  const int step0 = graph->OpIndex(FindOp(m, "l0.attn.scores.step0")->id);
  const int step1 = graph->OpIndex(FindOp(m, "l0.attn.scores.step1")->id);
  StatusOr<Recipe> recipe = ParseRecipe("attention m=2 n=1");
  ASSERT_TRUE(recipe.ok());
  // qkv's 32 rows in uneven blocks: the two steps' rows come from
  // different tiles in different pieces.
  fb::OwnershipT qkv;
  qkv.kind = fb::OwnershipKind::Blocked;
  qkv.partitions = {3, 1};
  qkv.replicas = 1;
  auto price = [&](const Coster& coster, int op) {
    StatusOr<OpCost> c = coster.PriceOp(*graph, op, *recipe, &qkv);
    EXPECT_TRUE(c.ok()) << c.status().message();
    return c.ok() ? c->exchange + c->compute : -1;
  };
  const StatusOr<Coster> fresh = Coster::Create(*m.target, {});
  ASSERT_TRUE(fresh.ok());
  const int64_t alone = price(*fresh, step1);
  const StatusOr<Coster> warm = Coster::Create(*m.target, {});
  ASSERT_TRUE(warm.ok());
  const int64_t first = price(*warm, step0);
  EXPECT_NE(first, alone) << "the steps should differ on this ownership";
  EXPECT_EQ(price(*warm, step1), alone);
}

const fb::DecisionT* FindDecision(const fb::ModuleT& m,
                                  const std::string& action) {
  for (const auto& d : m.log.back()->decisions) {
    if (d->action == action) return d.get();
  }
  return nullptr;
}

Status PlanIt(PlannerOptions options, fb::ModuleT* m) {
  return PlanOwnershipPass(std::move(options), {}).Run(m).status();
}

// Four images of 192 tokens fit the tiny target only with their attention
// in 4 steps; the planner tries 2 first, and logs both.
TEST(AttentionStepsTest, PlannerRunsAttentionInTheFewestStepsThatFit) {
  fb::ModuleT m = Layer(4, 192);
  ASSERT_TRUE(PlanIt({}, &m).ok());
  const fb::DecisionT* two = FindDecision(m, "run attention in 2 image steps");
  const fb::DecisionT* four =
      FindDecision(m, "run attention in 4 image steps");
  ASSERT_NE(two, nullptr);
  ASSERT_NE(four, nullptr);
  EXPECT_EQ(two->outcome, fb::Outcome::Rejected);
  EXPECT_EQ(four->outcome, fb::Outcome::Accepted);
  EXPECT_GT(four->bytes_before, four->bytes_after);
  EXPECT_NE(FindOp(m, "l0.attn.scores.step3"), nullptr);
  EXPECT_EQ(m.log.back()->flags.back(), "--attention-steps=4");
  EXPECT_TRUE(ir::VerifyModule(m).ok());
  // The plan fits where the images' attention at once does not.
  fb::ModuleT at_once = Layer(4, 192);
  PlannerOptions one;
  one.attention_steps = 1;
  EXPECT_EQ(PlanIt(one, &at_once).code(), StatusCode::kInfeasible);
}

// A checkpoint of a plan in image steps carries the stepped graph and the
// step count among its flags: resuming the unstepped input reproduces the
// plan byte for byte.
TEST(AttentionStepsTest, ResumeStepsTheInputAsTheCheckpointDid) {
  const fb::ModuleT input = Layer(4, 176);
  auto saved = std::make_shared<std::string>();
  PlannerOptions first;
  first.attempts = 4;
  first.save_checkpoint = [saved](const fb::ModuleT& m) {
    return ir::SerializeModule(m, "plan-ownership", saved.get());
  };
  fb::ModuleT whole = input;
  ASSERT_TRUE(PlanIt(first, &whole).ok());
  PlannerOptions resume;
  resume.attempts = 0;
  resume.resume.emplace();
  ASSERT_TRUE(ir::ParseModule(*saved, "ck.tilec", &*resume.resume).ok());
  resume.resume_name = "ck.tilec";
  fb::ModuleT resumed = input;
  const Status s = PlanIt(resume, &resumed);
  ASSERT_TRUE(s.ok()) << s.message();
  std::string a, b;
  ASSERT_TRUE(ir::SerializeModule(whole, "plan-ownership", &a).ok());
  ASSERT_TRUE(ir::SerializeModule(resumed, "plan-ownership", &b).ok());
  EXPECT_EQ(a, b);
  EXPECT_EQ(whole.log.back()->flags.back(), "--attention-steps=2");
  // A different count than the checkpoint's is refused.
  resume.attention_steps = 4;
  fb::ModuleT other = input;
  EXPECT_EQ(PlanIt(resume, &other).code(), StatusCode::kBadInput);
}

TEST(AttentionStepsTest, GivenStepsAreUsedAsTheyAre) {
  fb::ModuleT m = Layer(4, 16);
  PlannerOptions options;
  options.attention_steps = 2;
  ASSERT_TRUE(PlanIt(options, &m).ok());
  EXPECT_NE(FindOp(m, "l0.attn.ctx.step1"), nullptr);
  EXPECT_EQ(FindDecision(m, "run attention in 2 image steps"), nullptr);
  fb::ModuleT odd = Layer(4, 16);
  options.attention_steps = 3;
  EXPECT_EQ(PlanIt(options, &odd).code(), StatusCode::kBadInput);
  fb::ModuleT none = Layer(4, 16);
  options.attention_steps = 0;
  const Status zero = PlanIt(options, &none);
  EXPECT_EQ(zero.code(), StatusCode::kBadInput);
  EXPECT_EQ(zero.message(), "--attention_steps=0 must be at least 1");
}

// Where no step count fits, the exit names the closest plan both ways.
TEST(AttentionStepsTest, NoStepCountFitsExitsInfeasible) {
  fb::ModuleT m = Layer(4, 176);
  m.target->sram_bytes -= 32768;
  const Status s = PlanIt({}, &m);
  ASSERT_EQ(s.code(), StatusCode::kInfeasible);
  EXPECT_NE(s.message().find("no plan fits tile memory; the closest found"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("(nor with attention in image steps: no plan "
                             "fits tile memory"),
            std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace tilec::plan
