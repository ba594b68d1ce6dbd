#include "passes/core/pass.h"

#include <gtest/gtest.h>

#include <sstream>

#include "passes/core/decisions.h"

namespace tilec::passes {
namespace {

fb::ModuleT ModuleWithValues(int owned, int total) {
  fb::ModuleT m;
  for (int i = 0; i < total; ++i) {
    auto v = std::make_unique<fb::ValueT>();
    v->id = i;
    if (i < owned) v->ownership = std::make_unique<fb::OwnershipT>();
    m.values.push_back(std::move(v));
  }
  return m;
}

void AddRun(fb::ModuleT* m, const std::string& pass) {
  auto run = std::make_unique<fb::PassRunT>();
  run->pass = pass;
  m->log.push_back(std::move(run));
}

TEST(StageTest, FollowsWhatTheModuleHolds) {
  fb::ModuleT m = ModuleWithValues(0, 2);
  EXPECT_EQ(StageOf(m), Stage::kGraph);
  m = ModuleWithValues(2, 2);
  EXPECT_EQ(StageOf(m), Stage::kPlanned);
  AddRun(&m, "expand-reduce");
  EXPECT_EQ(StageOf(m), Stage::kReduced);
  m.program = std::make_unique<fb::DeviceProgramT>();
  EXPECT_EQ(StageOf(m), Stage::kProgram);
}

TEST(StageTest, RefusalNamesTheStageAndThePassToRunFirst) {
  fb::ModuleT graph = ModuleWithValues(0, 1);
  Status s = RequireStage(graph, "fuse", {Stage::kPlanned});
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
  EXPECT_EQ(s.message(),
            "fuse needs a planned graph, not an unplanned graph: run "
            "plan-ownership first");
  fb::ModuleT program = ModuleWithValues(1, 1);
  program.program = std::make_unique<fb::DeviceProgramT>();
  s = RequireStage(program, "quantize", {Stage::kGraph, Stage::kPlanned});
  EXPECT_EQ(s.message(),
            "quantize needs an unplanned graph or a planned graph, not a "
            "device program");
  EXPECT_TRUE(RequireStage(program, "x", {Stage::kProgram}).ok());
}

TEST(DecisionLogTest, LimitNumbersAppliedDecisionsAndHoldsBackTheRest) {
  DecisionLog log("p", /*max_decisions=*/2);
  EXPECT_TRUE(log.Apply({1}, "a", "why", {10, 8, 0, 0}));
  log.Reject({1}, "b", "too slow", {8, 9, 0, 0});
  EXPECT_TRUE(log.Apply({2}, "c", "why", {8, 5, 0, 0}));
  EXPECT_FALSE(log.Apply({3}, "d", "why", {5, 4, 0, 0}));
  EXPECT_EQ(log.applied(), 2);
  const auto& d = log.decisions();
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[0]->limit_index, 1);
  EXPECT_EQ(d[1]->limit_index, 0);
  EXPECT_EQ(d[2]->limit_index, 2);
  EXPECT_EQ(d[3]->limit_index, 0);
  EXPECT_EQ(d[3]->outcome, fb::Outcome::Rejected);
  EXPECT_EQ(d[3]->reason, "beyond --max-decisions=2 (would apply: why)");
  EXPECT_EQ(d[3]->cycles_after, 5) << "a held-back decision changes nothing";
}

fb::DecisionT Prepared(const std::string& action) {
  fb::DecisionT d;
  d.ops = {4};
  d.action = action;
  d.reason = "improves by 3 cycles";
  d.cycles_before = 10;
  d.cycles_after = 7;
  d.bytes_before = 100;
  d.bytes_after = 120;
  return d;
}

TEST(DecisionLogTest, TryApplyAcceptsUnderTheLimitAndHoldsBackBeyondIt) {
  DecisionLog log("p", /*max_decisions=*/1);
  EXPECT_TRUE(log.TryApply(Prepared("first")));
  EXPECT_EQ(log.remaining(), 0);
  EXPECT_FALSE(log.TryApply(Prepared("second")));
  EXPECT_EQ(log.applied(), 1);
  const auto& d = log.decisions();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0]->outcome, fb::Outcome::Accepted);
  EXPECT_EQ(d[0]->limit_index, 1);
  EXPECT_EQ(d[0]->reason, "improves by 3 cycles");
  EXPECT_EQ(d[0]->cycles_after, 7);
  EXPECT_EQ(d[1]->outcome, fb::Outcome::Rejected);
  EXPECT_EQ(d[1]->limit_index, 0);
  EXPECT_EQ(d[1]->reason,
            "beyond --max-decisions=1 (would apply: improves by 3 cycles)");
  EXPECT_EQ(d[1]->cycles_after, 10) << "a held-back decision changes nothing";
  EXPECT_EQ(d[1]->bytes_after, 100);
}

TEST(DecisionLogTest, ALimitSetLateCountsWhatWasRecordedBefore) {
  DecisionLog log("p");
  EXPECT_EQ(log.remaining(), -1);
  fb::DecisionT restored = Prepared("restored");
  restored.outcome = fb::Outcome::Accepted;
  restored.limit_index = 2;
  log.Record(restored);
  log.set_max_decisions(3);
  EXPECT_EQ(log.remaining(), 1);
  EXPECT_TRUE(log.TryApply(Prepared("third")));
  EXPECT_EQ(log.decisions().back()->limit_index, 3);
  EXPECT_FALSE(log.TryApply(Prepared("fourth")));
}

TEST(DecisionLogTest, ExplainPrintsTheDecisionsItSelects) {
  StatusOr<ExplainFilter> op7 = ExplainFilter::Parse("7");
  ASSERT_TRUE(op7.ok());
  std::ostringstream out;
  DecisionLog log("fuse", -1, *op7, &out);
  log.Info({3}, "not shown", "", {});
  log.Info({3, 7}, "shown", "because", {1, 2, 3, 4});
  EXPECT_EQ(out.str(),
            "fuse: info (3, 7) \"shown\" reason=\"because\" cycles 1 -> 2 "
            "bytes 3 -> 4\n");
  EXPECT_EQ(ExplainFilter::Parse("all")->kind, ExplainFilter::Kind::kAll);
  EXPECT_EQ(ExplainFilter::Parse("")->kind, ExplainFilter::Kind::kNone);
  EXPECT_EQ(ExplainFilter::Parse("7x").status().code(), StatusCode::kBadInput);
}

TEST(DecisionLogTest, RecordedDecisionsKeepTheirIndexAndCountTowardsTheLimit) {
  DecisionLog log("p", 3);
  fb::DecisionT restored;
  restored.outcome = fb::Outcome::Accepted;
  restored.limit_index = 2;
  log.Record(restored);
  EXPECT_EQ(log.applied(), 2);
  EXPECT_TRUE(log.Apply({}, "next", "", {}));
  EXPECT_EQ(log.decisions().back()->limit_index, 3);
  EXPECT_TRUE(log.LimitReached());
}

}  // namespace
}  // namespace tilec::passes
