#include "formats/repeat.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "formats/ir.h"
#include "formats/test_graph.h"

namespace tilec::ir {
namespace {

// x [2,4] -> h = x + b (bias) -> y = h + x, two iterations: b's twin b1.
struct Rolled {
  fb::ModuleT m;
  uint32_t x, b, h, y, b1;

  Rolled() {
    x = Value("x", {2, 4}, fb::ValueRole::Input);
    b = Value("b", {4}, fb::ValueRole::Weight);
    h = Value("h", {2, 4}, fb::ValueRole::Activation);
    y = Value("y", {2, 4}, fb::ValueRole::Output);
    b1 = Value("b1", {4}, fb::ValueRole::Weight);
    Op(fb::OpKind::BiasAdd, {x, b}, h);
    Op(fb::OpKind::Add, {h, x}, y);
    auto r = std::make_unique<fb::RepeatT>();
    r->carried_in = x;
    r->carried_out = y;
    r->count = 2;
    r->weights = {b};
    r->iteration_weights = {b1};
    m.repeats.push_back(std::move(r));
  }

  uint32_t Value(const std::string& name, std::vector<int64_t> shape,
                 fb::ValueRole role) {
    return testing::AddValue(&m, name, std::move(shape), role);
  }

  void Op(fb::OpKind kind, std::vector<uint32_t> operands, uint32_t result) {
    testing::AddOp(&m, kind, "op" + std::to_string(m.ops.size()),
                   std::move(operands), result);
  }
};

TEST(RepeatTest, FindsTheBodyAndWhatEachIterationReads) {
  Rolled r;
  ASSERT_TRUE(VerifyModule(r.m).ok()) << VerifyModule(r.m).message();
  StatusOr<std::vector<RepeatBody>> bodies = RepeatBodies(r.m);
  ASSERT_TRUE(bodies.ok());
  ASSERT_EQ(bodies->size(), 1u);
  EXPECT_EQ((*bodies)[0].begin, 0u);
  EXPECT_EQ((*bodies)[0].end, 2u);
  const fb::RepeatT& rep = *r.m.repeats[0];
  EXPECT_EQ(IterationValue(rep, 0, r.x), r.x);
  EXPECT_EQ(IterationValue(rep, 1, r.x), r.y);
  EXPECT_EQ(IterationValue(rep, 1, r.b), r.b1);
  EXPECT_EQ(IterationValue(rep, 1, r.h), r.h);
  uint32_t body = 0;
  EXPECT_EQ(TwinOf(r.m, r.b1, &body), &rep);
  EXPECT_EQ(body, r.b);
  EXPECT_EQ(TwinOf(r.m, r.b, nullptr), nullptr);
}

std::string Refusal(const fb::ModuleT& m) {
  const Status s = VerifyModule(m);
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
  return s.message();
}

TEST(RepeatTest, RefusesATwinAnOpReads) {
  Rolled r;
  r.m.ops[0]->operands[1] = r.b1;
  EXPECT_NE(Refusal(r.m).find("weight %4 of iteration 1 is read by an op"),
            std::string::npos)
      << Refusal(r.m);
}

TEST(RepeatTest, RefusesTheWrongNumberOfIterationWeights) {
  Rolled r;
  r.m.repeats[0]->count = 3;
  EXPECT_NE(Refusal(r.m).find("1 iteration weights for 1 weights and 3 "
                              "iterations (needs 2)"),
            std::string::npos)
      << Refusal(r.m);
}

TEST(RepeatTest, RefusesCarriedValuesOfDifferentShapes) {
  Rolled r;
  r.m.repeats[0]->carried_out = r.b1;
  EXPECT_FALSE(VerifyModule(r.m).ok());
  Rolled s;
  s.m.values[s.y]->dtype = fb::DType::F32;
  EXPECT_NE(Refusal(s.m).find("differ in shape, dtype or scale"),
            std::string::npos)
      << Refusal(s.m);
}

TEST(RepeatTest, RefusesABodyValueReadAfterTheBody) {
  Rolled r;
  const uint32_t z = r.Value("z", {2, 4}, fb::ValueRole::Activation);
  r.Op(fb::OpKind::Add, {r.h, r.y}, z);
  r.m.values[r.y]->role = fb::ValueRole::Activation;
  r.m.values[z]->role = fb::ValueRole::Output;
  EXPECT_NE(Refusal(r.m).find("only carried_out leaves the body"),
            std::string::npos)
      << Refusal(r.m);
}
}  // namespace
}  // namespace tilec::ir
