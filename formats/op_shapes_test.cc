#include "formats/op_shapes.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "flatbuffers/flatbuffers.h"
#include "formats/tilec_generated.h"

namespace tilec::ir {
namespace {

using ::testing::HasSubstr;
using Shapes = std::vector<std::vector<int64_t>>;

OpShapeQuery Query(fb::OpKind kind, Shapes operands, Shapes results,
                   int32_t heads = 0, int32_t head_dim = 0) {
  OpShapeQuery q;
  q.id = 19;
  q.kind = kind;
  q.name = "l0.test";
  q.heads = heads;
  q.head_dim = head_dim;
  q.operands = std::move(operands);
  q.results = std::move(results);
  return q;
}

TEST(OpShapes, ShapeToString) {
  EXPECT_EQ(ShapeToString({}), "[]");
  EXPECT_EQ(ShapeToString({729, 1152}), "[729,1152]");
}

TEST(OpShapes, LayerNorm) {
  const auto k = fb::OpKind::LayerNorm;
  EXPECT_EQ(
      CheckOpShapes(Query(k, {{729, 1152}, {1152}, {1152}}, {{729, 1152}}))
          .message(),
      "");
  EXPECT_EQ(
      CheckOpShapes(Query(k, {{729, 1152}, {1151}, {1152}}, {{729, 1152}}))
          .message(),
      "op 19 (LayerNorm l0.test): operand 1 has shape [1151], expected "
      "[1152] (the columns of operand 0 [729,1152])");
  EXPECT_THAT(CheckOpShapes(Query(k, {{729, 1152}, {1152}, {1}}, {{729, 1152}}))
                  .message(),
              HasSubstr("operand 2 has shape [1]"));
  EXPECT_THAT(
      CheckOpShapes(Query(k, {{729, 1152}, {1152}, {1152}}, {{728, 1152}}))
          .message(),
      HasSubstr("result 0 has shape [728,1152]"));
  EXPECT_THAT(
      CheckOpShapes(Query(k, {{729, 1152}, {1152}}, {{729, 1152}})).message(),
      HasSubstr("expected 3 operands and 1 result, got 2 operands"));
  EXPECT_THAT(
      CheckOpShapes(Query(k, {{1152}, {1152}, {1152}}, {{1152}})).message(),
      HasSubstr("expected rank 2"));
}

TEST(OpShapes, Patchify) {
  OpShapeQuery q = Query(fb::OpKind::Patchify, {{1, 3, 28, 42}}, {{6, 588}});
  q.patch = 14;
  EXPECT_EQ(CheckOpShapes(q).message(), "");
  q.results = {{6, 587}};
  EXPECT_THAT(CheckOpShapes(q).message(),
              HasSubstr("result 0 has shape [6,587], expected [6,588] "
                        "([B*floor(H/p)*floor(W/p), C*p*p])"));
  // 384 / 14: SigLIP so400m's 27 x 27 patches drop the last 6 pixels.
  q.operands = {{1, 3, 384, 384}};
  q.results = {{729, 588}};
  EXPECT_EQ(CheckOpShapes(q).message(), "");
  q.operands = {{1, 3, 28, 42}};
  q.results = {{6, 588}};
  q.patch = 29;
  EXPECT_THAT(CheckOpShapes(q).message(),
              HasSubstr("attribute patch=29 must be "
                        "positive and at most the height"));
  q.patch = 0;
  EXPECT_THAT(CheckOpShapes(q).message(), HasSubstr("attribute patch=0"));
  q.patch = 14;
  q.operands = {{3, 28, 42}};
  EXPECT_THAT(CheckOpShapes(q).message(), HasSubstr("expected rank 4"));
}

// The three patterns of issue 12, for 2 images of 4 patches, width 8.
TEST(OpShapes, CopyRows) {
  const auto k = fb::OpKind::CopyRows;
  // A class token [1,8] before each image's patches [8,8]: [10,8].
  OpShapeQuery q = Query(k, {{1, 8}, {8, 8}}, {{10, 8}});
  q.name = "embed.class";
  q.id = 3;
  q.rows = {{0, 0, 1, 0}, {1, 0, 4, 1}, {0, 0, 1, 5}, {1, 4, 4, 6}};
  EXPECT_EQ(CheckOpShapes(q).message(), "");
  // The position table [5,8] over the batch: [10,8].
  OpShapeQuery pos = Query(k, {{5, 8}}, {{10, 8}});
  pos.rows = {{0, 0, 5, 0}, {0, 0, 5, 5}};
  EXPECT_EQ(CheckOpShapes(pos).message(), "");
  // Each image's class row: [2,8] from [10,8].
  OpShapeQuery pick = Query(k, {{10, 8}}, {{2, 8}});
  pick.rows = {{0, 0, 1, 0}, {0, 5, 1, 1}};
  EXPECT_EQ(CheckOpShapes(pick).message(), "");

  OpShapeQuery bad = q;
  bad.rows[2].at = 6;
  EXPECT_EQ(CheckOpShapes(bad).message(),
            "op 3 (CopyRows embed.class): segment 2 (operand 0 rows 0+1 at 6) "
            "starts at row 6, expected 5 (segments are sorted and "
            "contiguous)");
  bad = q;
  bad.rows[3].first = 5;
  EXPECT_THAT(CheckOpShapes(bad).message(),
              HasSubstr("segment 3 (operand 1 rows 5+4 at 6) reads past "
                        "operand 1 [8,8]"));
  bad.rows[3].first = -1;
  EXPECT_THAT(CheckOpShapes(bad).message(), HasSubstr("reads past operand 1"));
  bad = q;
  bad.rows[1].count = 0;
  EXPECT_THAT(CheckOpShapes(bad).message(),
              HasSubstr("segment 1 (operand 1 rows 0+0 at 1) copies no rows"));
  bad = q;
  bad.rows[0].operand = 2;
  EXPECT_THAT(CheckOpShapes(bad).message(),
              HasSubstr("segment 0 (operand 2 rows 0+1 at 0) names operand 2 "
                        "of 2 operands"));
  bad = q;
  bad.rows.pop_back();
  EXPECT_THAT(CheckOpShapes(bad).message(),
              HasSubstr("segments cover rows [0, 6) of result 0 [10,8], "
                        "expected all of them"));
  bad = q;
  bad.rows[3].count = 5;
  bad.rows[3].first = 3;
  EXPECT_THAT(CheckOpShapes(bad).message(),
              HasSubstr("writes past result 0 [10,8]"));
  bad = q;
  bad.rows.clear();
  EXPECT_THAT(CheckOpShapes(bad).message(), HasSubstr("has no row segments"));
  bad = q;
  bad.rows = {{1, 0, 8, 0}, {1, 0, 2, 8}};
  EXPECT_THAT(CheckOpShapes(bad).message(),
              HasSubstr("operand 0 is read by no segment"));
  bad = q;
  bad.operands[0] = {1, 7};
  EXPECT_THAT(CheckOpShapes(bad).message(),
              HasSubstr("operand 0 has shape [1,7], expected 8 columns (the "
                        "columns of result 0 [10,8])"));
  bad = q;
  bad.operands[1] = {2, 4, 8};
  EXPECT_THAT(CheckOpShapes(bad).message(),
              HasSubstr("operand 1 has shape [2,4,8], expected rank 2"));
  bad = q;
  bad.operands.clear();
  EXPECT_THAT(CheckOpShapes(bad).message(),
              HasSubstr("expected at least 1 operand and 1 result"));
}

TEST(OpShapes, MatMul) {
  const auto k = fb::OpKind::MatMul;
  EXPECT_EQ(CheckOpShapes(Query(k, {{729, 1152}, {1152, 4304}}, {{729, 4304}}))
                .message(),
            "");
  EXPECT_EQ(CheckOpShapes(Query(k, {{729, 1152}, {1151, 4304}}, {{729, 4304}}))
                .message(),
            "op 19 (MatMul l0.test): operand 0 [729,1152] and operand 1 "
            "[1151,4304] disagree on K (1152 vs 1151)");
  EXPECT_THAT(
      CheckOpShapes(Query(k, {{729, 1152}, {1152, 4304}}, {{729, 1152}}))
          .message(),
      HasSubstr("result 0 has shape [729,1152], expected [729,4304]"));
  EXPECT_THAT(
      CheckOpShapes(Query(k, {{729, 1152}, {1152, 4304, 1}}, {{729, 4304}}))
          .message(),
      HasSubstr("operand 1 has shape [1152,4304,1], expected rank 2"));
}

TEST(OpShapes, BiasAdd) {
  const auto k = fb::OpKind::BiasAdd;
  EXPECT_EQ(
      CheckOpShapes(Query(k, {{729, 4304}, {4304}}, {{729, 4304}})).message(),
      "");
  EXPECT_EQ(
      CheckOpShapes(Query(k, {{729, 4304}, {4303}}, {{729, 4304}})).message(),
      "op 19 (BiasAdd l0.test): operand 1 has shape [4303], expected "
      "[4304] (the columns of operand 0 [729,4304])");
  EXPECT_THAT(
      CheckOpShapes(Query(k, {{729, 4304}, {4304}}, {{4304, 729}})).message(),
      HasSubstr("result 0"));
}

TEST(OpShapes, SameShapeKinds) {
  for (fb::OpKind k : {fb::OpKind::Gelu, fb::OpKind::Cast,
                       fb::OpKind::Softmax, fb::OpKind::Redistribute}) {
    EXPECT_EQ(CheckOpShapes(Query(k, {{3, 4}}, {{3, 4}})).message(), "");
    EXPECT_EQ(CheckOpShapes(Query(k, {{1, 2, 3, 3}}, {{1, 2, 3, 3}})).message(),
              "");
    EXPECT_THAT(CheckOpShapes(Query(k, {{3, 4}}, {{4, 3}})).message(),
                HasSubstr("result 0 has shape [4,3], expected [3,4]"));
    EXPECT_THAT(CheckOpShapes(Query(k, {{3, 4}, {3, 4}}, {{3, 4}})).message(),
                HasSubstr("expected 1 operand and 1 result"));
  }
}

TEST(OpShapes, Add) {
  const auto k = fb::OpKind::Add;
  EXPECT_EQ(CheckOpShapes(Query(k, {{729, 1152}, {729, 1152}}, {{729, 1152}}))
                .message(),
            "");
  EXPECT_THAT(CheckOpShapes(Query(k, {{729, 1152}, {729, 1151}}, {{729, 1152}}))
                  .message(),
              HasSubstr("operand 1 has shape [729,1151], expected [729,1152]"));
  EXPECT_THAT(CheckOpShapes(Query(k, {{729, 1152}, {729, 1152}},
                                  {{729, 1152}, {729, 1152}}))
                  .message(),
              HasSubstr("got 2 operands and 2 results"));
}

TEST(OpShapes, AttentionScores) {
  const auto k = fb::OpKind::AttentionScores;
  EXPECT_EQ(CheckOpShapes(Query(k, {{729, 3456}}, {{1, 16, 729, 729}}, 16, 72))
                .message(),
            "");
  // Batch 2: rows = 2 * 729.
  EXPECT_EQ(CheckOpShapes(Query(k, {{1458, 3456}}, {{2, 16, 729, 729}}, 16, 72))
                .message(),
            "");
  EXPECT_THAT(
      CheckOpShapes(Query(k, {{729, 3455}}, {{1, 16, 729, 729}}, 16, 72))
          .message(),
      HasSubstr("operand 0 has shape [729,3455], expected 3*heads*head_dim"));
  EXPECT_THAT(
      CheckOpShapes(Query(k, {{729, 3456}}, {{1, 8, 729, 729}}, 16, 72))
          .message(),
      HasSubstr("result 0 has shape [1,8,729,729], expected [batch, heads=16"));
  EXPECT_THAT(
      CheckOpShapes(Query(k, {{729, 3456}}, {{1, 16, 729, 728}}, 16, 72))
          .message(),
      HasSubstr("result 0"));
  EXPECT_THAT(
      CheckOpShapes(Query(k, {{1458, 3456}}, {{1, 16, 729, 729}}, 16, 72))
          .message(),
      HasSubstr("batch*tokens = 1458"));
  EXPECT_THAT(CheckOpShapes(Query(k, {{729, 3456}}, {{1, 16, 729, 729}}, 0, 72))
                  .message(),
              HasSubstr("heads=0 and head_dim=72 must be positive"));
  EXPECT_THAT(CheckOpShapes(Query(k, {{729, 3456}}, {{16, 729, 729}}, 16, 72))
                  .message(),
              HasSubstr("expected rank 4"));
}

// Attention in image steps: images [first_image, first_image + B) of qkv.
TEST(OpShapes, AttentionInImageSteps) {
  const auto s = fb::OpKind::AttentionScores;
  const auto c = fb::OpKind::AttentionContext;
  auto scores = [&](int first_image, std::vector<int64_t> result) {
    OpShapeQuery q = Query(s, {{4 * 729, 3456}}, {result}, 16, 72);
    q.first_image = first_image;
    return CheckOpShapes(q).message();
  };
  EXPECT_EQ(scores(0, {2, 16, 729, 729}), "");
  EXPECT_EQ(scores(2, {2, 16, 729, 729}), "");
  EXPECT_THAT(scores(3, {2, 16, 729, 729}),
              HasSubstr("first_image=3: images [3, 5) of 729 tokens do not "
                        "lie in the 2916 rows of the qkv operand"));
  EXPECT_THAT(scores(-2, {2, 16, 729, 729}),
              HasSubstr("first_image=-2 must be -1 or an image"));
  // Not in steps (-1), the op reads every image.
  EXPECT_THAT(scores(-1, {2, 16, 729, 729}), HasSubstr("batch*tokens = 2916"));
  OpShapeQuery context =
      Query(c, {{2, 16, 729, 729}, {4 * 729, 3456}}, {{1458, 1152}}, 16, 72);
  context.first_image = 2;
  EXPECT_EQ(CheckOpShapes(context).message(), "");
  context.results = {{2916, 1152}};
  EXPECT_THAT(CheckOpShapes(context).message(),
              HasSubstr("result 0 has shape [2916,1152], expected [1458,1152]"));
  // Cross-attention does not run in steps.
  OpShapeQuery cross = Query(s, {{2, 1152}, {1458, 2304}}, {{2, 16, 1, 729}},
                             16, 72);
  cross.first_image = 0;
  EXPECT_THAT(CheckOpShapes(cross).message(),
              HasSubstr("cross-attention does not run in image steps"));
}

TEST(OpShapes, AttentionContext) {
  const auto k = fb::OpKind::AttentionContext;
  EXPECT_EQ(CheckOpShapes(Query(k, {{1, 16, 729, 729}, {729, 3456}},
                                {{729, 1152}}, 16, 72))
                .message(),
            "");
  EXPECT_EQ(CheckOpShapes(Query(k, {{2, 16, 729, 729}, {1458, 3456}},
                                {{1458, 1152}}, 16, 72))
                .message(),
            "");
  EXPECT_THAT(CheckOpShapes(Query(k, {{1, 16, 729, 729}, {729, 3456}},
                                  {{729, 3456}}, 16, 72))
                  .message(),
              HasSubstr("result 0 has shape [729,3456], expected [729,1152]"));
  EXPECT_THAT(CheckOpShapes(Query(k, {{1, 16, 257, 257}, {729, 3456}},
                                  {{729, 1152}}, 16, 72))
                  .message(),
              HasSubstr("operand 0 has shape [1,16,257,257]"));
  EXPECT_THAT(CheckOpShapes(Query(k, {{1, 16, 729, 729}, {729, 3072}},
                                  {{729, 1024}}, 16, 72))
                  .message(),
              HasSubstr("operand 1 has shape [729,3072]"));
}

// The MAP head: one probe query over 729 keys.
TEST(OpShapes, CrossAttention) {
  const auto s = fb::OpKind::AttentionScores;
  const auto c = fb::OpKind::AttentionContext;
  EXPECT_EQ(CheckOpShapes(Query(s, {{1, 1152}, {729, 2304}},
                                {{1, 16, 1, 729}}, 16, 72))
                .message(),
            "");
  EXPECT_EQ(CheckOpShapes(Query(c, {{1, 16, 1, 729}, {729, 2304}},
                                {{1, 1152}}, 16, 72))
                .message(),
            "");
  EXPECT_EQ(CheckOpShapes(Query(c, {{2, 16, 3, 729}, {1458, 2304}},
                                {{6, 1152}}, 16, 72))
                .message(),
            "");
  EXPECT_THAT(CheckOpShapes(Query(s, {{1, 1152}, {729, 3456}},
                                  {{1, 16, 1, 729}}, 16, 72))
                  .message(),
              HasSubstr("operand 1 has shape [729,3456], expected "
                        "2*heads*head_dim = 2*16*72 columns (the kv operand)"));
  EXPECT_THAT(CheckOpShapes(Query(s, {{1, 2304}, {729, 2304}},
                                  {{1, 16, 1, 729}}, 16, 72))
                  .message(),
              HasSubstr("operand 0 has shape [1,2304], expected "
                        "1*heads*head_dim"));
  EXPECT_THAT(CheckOpShapes(Query(s, {{1, 1152}, {729, 2304}},
                                  {{1, 16, 2, 729}}, 16, 72))
                  .message(),
              HasSubstr("batch*Tq = 1 and batch*Tk = 729"));
  EXPECT_THAT(CheckOpShapes(Query(c, {{1, 16, 1, 729}, {729, 2304}},
                                  {{729, 1152}}, 16, 72))
                  .message(),
              HasSubstr("result 0 has shape [729,1152], expected [1,1152]"));
}

TEST(OpShapes, NonPositiveDims) {
  EXPECT_EQ(
      CheckOpShapes(Query(fb::OpKind::Gelu, {{0, 4}}, {{0, 4}})).message(),
      "op 19 (Gelu l0.test): operand 0 has shape [0,4], every "
      "dimension must be positive");
  EXPECT_THAT(
      CheckOpShapes(Query(fb::OpKind::Gelu, {{3, 4}}, {{3, -4}})).message(),
      HasSubstr("result 0 has shape [3,-4]"));
}

TEST(OpShapes, OverflowDoesNotHideMismatch) {
  // 2^32 * 2^32 overflows int64; the product must be rejected, not wrapped.
  const int64_t big = int64_t{1} << 32;
  EXPECT_THAT(CheckOpShapes(Query(fb::OpKind::AttentionScores, {{729, 3456}},
                                  {{big, 16, big, big}}, 16, 72))
                  .message(),
              HasSubstr("result 0"));
  EXPECT_THAT(CheckOpShapes(Query(fb::OpKind::AttentionScores, {{729, 6}},
                                  {{1, 1 << 30, 729, 729}}, 1 << 30, 1 << 30))
                  .message(),
              HasSubstr("expected 3*heads*head_dim"));
}

TEST(OpShapes, UncheckedKindsAccepted) {
  for (fb::OpKind k :
       {fb::OpKind::Fused, fb::OpKind::Moments, fb::OpKind::Normalize}) {
    EXPECT_EQ(CheckOpShapes(Query(k, {{3, 4}, {7}}, {{2}})).message(), "");
  }
}

TEST(OpShapes, UnnamedOp) {
  OpShapeQuery q = Query(fb::OpKind::Add, {{1, 2}, {1, 3}}, {{1, 2}});
  q.name.clear();
  EXPECT_THAT(CheckOpShapes(q).message(), HasSubstr("op 19 (Add): operand 1"));
}

// A two-op module: MatMul then BiasAdd, with one broken variant.
fb::ModuleT SmallModule() {
  fb::ModuleT m;
  auto value = [&m](std::vector<int64_t> shape) {
    auto v = std::make_unique<fb::ValueT>();
    v->id = static_cast<uint32_t>(m.values.size());
    v->name = "v" + std::to_string(v->id);
    v->shape = std::move(shape);
    m.values.push_back(std::move(v));
  };
  value({4, 8});   // 0 a
  value({8, 16});  // 1 w
  value({4, 16});  // 2 a*w
  value({16});     // 3 b
  value({4, 16});  // 4 out
  auto op = [&m](fb::OpKind kind, std::vector<uint32_t> operands,
                 std::vector<uint32_t> results) {
    auto o = std::make_unique<fb::OperationT>();
    o->id = static_cast<uint32_t>(m.ops.size());
    o->kind = kind;
    o->name = "op" + std::to_string(o->id);
    o->operands = std::move(operands);
    o->results = std::move(results);
    m.ops.push_back(std::move(o));
  };
  op(fb::OpKind::MatMul, {0, 1}, {2});
  op(fb::OpKind::BiasAdd, {2, 3}, {4});
  return m;
}

std::vector<uint8_t> Pack(const fb::ModuleT& m) {
  flatbuffers::FlatBufferBuilder fbb;
  fb::FinishModuleBuffer(fbb, fb::Module::Pack(fbb, &m));
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

TEST(OpShapes, ObjectAndFlatModules) {
  fb::ModuleT m = SmallModule();
  EXPECT_EQ(CheckOpShapes(*m.ops[0], m).message(), "");
  EXPECT_EQ(CheckOpShapes(*m.ops[1], m).message(), "");
  m.values[3]->shape = {15};
  const std::string expected =
      "op 1 (BiasAdd op1): operand 1 has shape [15], expected [16] (the "
      "columns of operand 0 [4,16])";
  EXPECT_EQ(CheckOpShapes(*m.ops[1], m).message(), expected);
  const std::vector<uint8_t> bytes = Pack(m);
  const fb::Module* flat = fb::GetModule(bytes.data());
  EXPECT_EQ(CheckOpShapes(*flat->ops()->Get(0), *flat).message(), "");
  EXPECT_EQ(CheckOpShapes(*flat->ops()->Get(1), *flat).message(), expected);
}

TEST(OpShapes, CopyRowsSegmentsFromModules) {
  fb::ModuleT m = SmallModule();
  auto v = std::make_unique<fb::ValueT>();
  v->id = 5;
  v->shape = {2, 16};
  m.values.push_back(std::move(v));
  auto op = std::make_unique<fb::OperationT>();
  op->id = 2;
  op->kind = fb::OpKind::CopyRows;
  op->name = "pick";
  op->operands = {4};
  op->results = {5};
  for (int64_t at : {0, 1}) AppendRowSegment({0, 3 * at, 1, at}, op.get());
  m.ops.push_back(std::move(op));
  EXPECT_EQ(CheckOpShapes(*m.ops[2], m).message(), "");
  m.ops[2]->rows[1]->first = 4;
  const std::string expected =
      "op 2 (CopyRows pick): segment 1 (operand 0 rows 4+1 at 1) reads past "
      "operand 0 [4,16]";
  EXPECT_EQ(CheckOpShapes(*m.ops[2], m).message(), expected);
  const std::vector<uint8_t> bytes = Pack(m);
  const fb::Module* flat = fb::GetModule(bytes.data());
  EXPECT_EQ(CheckOpShapes(*flat->ops()->Get(2), *flat).message(), expected);
}

TEST(OpShapes, MissingValue) {
  fb::ModuleT m = SmallModule();
  m.ops[1]->operands[1] = 99;
  const std::string expected =
      "op 1 (BiasAdd op1): operand 1 refers to value 99, which does not exist";
  EXPECT_EQ(CheckOpShapes(*m.ops[1], m).message(), expected);
  const std::vector<uint8_t> bytes = Pack(m);
  const fb::Module* flat = fb::GetModule(bytes.data());
  EXPECT_EQ(CheckOpShapes(*flat->ops()->Get(1), *flat).message(), expected);
}

TEST(OpShapes, SparseValueIds) {
  // Ids need not match positions; the lookup goes by id.
  fb::ModuleT m = SmallModule();
  for (auto& v : m.values) v->id += 100;
  for (auto& op : m.ops) {
    for (uint32_t& id : op->operands) id += 100;
    for (uint32_t& id : op->results) id += 100;
  }
  std::swap(m.values[0], m.values[4]);
  EXPECT_EQ(CheckOpShapes(*m.ops[0], m).message(), "");
  EXPECT_EQ(CheckOpShapes(*m.ops[1], m).message(), "");
  const std::vector<uint8_t> bytes = Pack(m);
  const fb::Module* flat = fb::GetModule(bytes.data());
  EXPECT_EQ(CheckOpShapes(*flat->ops()->Get(1), *flat).message(), "");
}

}  // namespace
}  // namespace tilec::ir
