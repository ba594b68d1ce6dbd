#include "passes/import/model_builder.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "flatbuffers/flatbuffers.h"
#include "formats/tilec_generated.h"
#include "formats/op_shapes.h"

namespace tilec::passes {
namespace {

using ::testing::HasSubstr;

fb::ModuleT Build(std::string_view preset, std::string_view part,
                  const ModelOverrides& overrides = {}) {
  fb::ModuleT module;
  const Status built = BuildModel(preset, part, overrides, &module);
  EXPECT_TRUE(built.ok()) << preset << " " << part << ": " << built.message();
  return module;
}

std::vector<uint8_t> Pack(const fb::ModuleT& module) {
  flatbuffers::FlatBufferBuilder fbb;
  fb::FinishModuleBuffer(fbb, fb::Module::Pack(fbb, &module));
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

const fb::ValueT& ValueNamed(const fb::ModuleT& m, const std::string& name) {
  for (const auto& v : m.values) {
    if (v->name == name) return *v;
  }
  ADD_FAILURE() << "no value " << name;
  static const fb::ValueT kMissing;
  return kMissing;
}

const fb::OperationT& OpNamed(const fb::ModuleT& m, const std::string& name) {
  for (const auto& op : m.ops) {
    if (op->name == name) return *op;
  }
  ADD_FAILURE() << "no op " << name;
  static const fb::OperationT kMissing;
  return kMissing;
}

// ------------------------------------------------------------ structure

// Counted by hand from the graph conventions:
//   mlp-block: x; ln2 gamma, beta, out; up w, out; up_bias b, out; gelu out;
//              down w, out; down_bias b, out; residual out        = 14 values
//              ln2, up, up_bias, gelu, down, down_bias, residual  =  7 ops
//   layer:     x + attention half (ln1 3, qkv 2, qkv_bias 2, scores 1,
//              softmax 1, ctx 1, proj 2, proj_bias 2, residual 1 = 15) +
//              the 13 of the MLP half                             = 29 values
//              9 attention ops + 7 MLP ops                        = 16 ops
//   ViT's whole model: the embedding (pixel_values; patchify out; patch
//              w, out; patch_bias b, out; class; class_concat out;
//              position w, out = 10 values, 5 ops), the layers, the head
//              (class_rows out; post_ln 3; classifier 2, classifier_bias 2
//              = 8 values, 4 ops).
//   CLIP's: no patch bias, pre_ln (11 values, 5 ops); the head ends in
//              proj 2 instead (6 values, 3 ops).
//   SigLIP's whole model: the embedding (pixel_values; patchify out;
//              patch w, out; patch_bias b, out; position w, out =  8 values,
//              4 ops), 28 * layers values and 16 * layers ops, the head
//              (post_ln 3; probe; q 2, q_bias 2, kv 2, kv_bias 2, scores,
//              softmax, ctx, proj 2, proj_bias 2 = 19; the MLP block's
//              13 = 32 values, 10 + 7 = 17 ops).
struct CountCase {
  const char* preset;
  const char* part;
  size_t values;
  size_t ops;
};

constexpr CountCase kCounts[] = {
    {"siglip-so400m-384", "mlp-block", 14, 7},
    {"siglip-so400m-384", "layer", 29, 16},
    {"siglip-so400m-384", "model", 8 + 28 * 27 + 32, 4 + 16 * 27 + 17},
    {"vit-b16-224", "mlp-block", 14, 7},
    {"vit-b16-224", "layer", 29, 16},
    {"vit-b16-224", "model", 10 + 28 * 12 + 8, 5 + 16 * 12 + 4},
    {"clip-vit-l14-224", "mlp-block", 14, 7},
    {"clip-vit-l14-224", "layer", 29, 16},
    {"clip-vit-l14-224", "model", 11 + 28 * 24 + 6, 5 + 16 * 24 + 3},
};

class EveryPresetAndPart : public ::testing::TestWithParam<CountCase> {};

TEST_P(EveryPresetAndPart, Counts) {
  const CountCase& c = GetParam();
  const fb::ModuleT m = Build(c.preset, c.part);
  EXPECT_EQ(m.values.size(), c.values);
  EXPECT_EQ(m.ops.size(), c.ops);
}

TEST_P(EveryPresetAndPart, IdsDenseInCreationOrder) {
  const fb::ModuleT m = Build(GetParam().preset, GetParam().part);
  for (size_t i = 0; i < m.values.size(); ++i) {
    EXPECT_EQ(m.values[i]->id, i);
  }
  for (size_t i = 0; i < m.ops.size(); ++i) EXPECT_EQ(m.ops[i]->id, i);
}

TEST_P(EveryPresetAndPart, DataflowIsWellFormed) {
  const fb::ModuleT m = Build(GetParam().preset, GetParam().part);
  std::vector<bool> defined(m.values.size(), false);
  std::vector<int> producers(m.values.size(), 0);
  std::vector<int> uses(m.values.size(), 0);
  for (const auto& v : m.values) {
    if (v->role == fb::ValueRole::Input || v->role == fb::ValueRole::Weight) {
      defined[v->id] = true;
    }
  }
  for (const auto& op : m.ops) {
    for (uint32_t id : op->operands) {
      ASSERT_LT(id, m.values.size());
      EXPECT_TRUE(defined[id]) << "op " << op->id << " (" << op->name
                               << ") reads " << m.values[id]->name
                               << " before it is defined";
      ++uses[id];
    }
    ASSERT_EQ(op->results.size(), 1u);
    for (uint32_t id : op->results) {
      ASSERT_LT(id, m.values.size());
      ++producers[id];
      defined[id] = true;
      EXPECT_EQ(m.values[id]->name, op->name + ".out");
    }
  }
  for (const auto& v : m.values) {
    switch (v->role) {
      case fb::ValueRole::Input:
      case fb::ValueRole::Weight:
        EXPECT_EQ(producers[v->id], 0) << v->name;
        EXPECT_GE(uses[v->id], 1) << v->name << " is never read";
        ASSERT_NE(v->init, nullptr) << v->name;
        break;
      case fb::ValueRole::Activation:
        EXPECT_EQ(producers[v->id], 1) << v->name;
        EXPECT_GE(uses[v->id], 1) << v->name << " is never read";
        EXPECT_EQ(v->init, nullptr) << v->name;
        break;
      case fb::ValueRole::Output:
        EXPECT_EQ(producers[v->id], 1) << v->name;
        EXPECT_EQ(uses[v->id], 0) << v->name;
        break;
    }
    EXPECT_EQ(v->dtype, fb::DType::F16) << v->name;
  }
  // Exactly one input (`x`, or the image of a whole model, first) and one
  // output (last).
  EXPECT_THAT(m.values.front()->name, ::testing::AnyOf("x", "pixel_values"));
  EXPECT_EQ(m.values.front()->role, fb::ValueRole::Input);
  EXPECT_EQ(m.values.back()->role, fb::ValueRole::Output);
  int inputs = 0, outputs = 0;
  for (const auto& v : m.values) {
    inputs += v->role == fb::ValueRole::Input;
    outputs += v->role == fb::ValueRole::Output;
  }
  EXPECT_EQ(inputs, 1);
  EXPECT_EQ(outputs, 1);
}

TEST_P(EveryPresetAndPart, NamesUnique) {
  const fb::ModuleT m = Build(GetParam().preset, GetParam().part);
  std::set<std::string> value_names, op_names;
  for (const auto& v : m.values) {
    EXPECT_TRUE(value_names.insert(v->name).second) << v->name;
  }
  for (const auto& op : m.ops) {
    EXPECT_TRUE(op_names.insert(op->name).second) << op->name;
  }
}

TEST_P(EveryPresetAndPart, ShapesConsistent) {
  const fb::ModuleT m = Build(GetParam().preset, GetParam().part);
  for (const auto& op : m.ops)
    EXPECT_EQ(ir::CheckOpShapes(*op, m).message(), "");
  // The flat form agrees.
  const std::vector<uint8_t> bytes = Pack(m);
  const fb::Module* flat = fb::GetModule(bytes.data());
  for (const fb::Operation* op : *flat->ops()) {
    EXPECT_EQ(ir::CheckOpShapes(*op, *flat).message(), "");
  }
}

TEST_P(EveryPresetAndPart, DeterministicBytes) {
  const fb::ModuleT a = Build(GetParam().preset, GetParam().part);
  const fb::ModuleT b = Build(GetParam().preset, GetParam().part);
  const std::vector<uint8_t> bytes = Pack(a);
  EXPECT_EQ(bytes, Pack(b));
  flatbuffers::Verifier verifier(bytes.data(), bytes.size());
  EXPECT_TRUE(fb::VerifyModuleBuffer(verifier));
}

TEST_P(EveryPresetAndPart, WeightSeedsDistinct) {
  const fb::ModuleT m = Build(GetParam().preset, GetParam().part);
  std::set<uint64_t> seeds;
  for (const auto& v : m.values) {
    if (v->init == nullptr) continue;
    EXPECT_TRUE(seeds.insert(v->init->seed).second) << v->name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    ModelBuilder, EveryPresetAndPart, ::testing::ValuesIn(kCounts),
    [](const ::testing::TestParamInfo<CountCase>& info) {
      std::string name = std::string(info.param.preset) + "_" +
                         std::string(info.param.part);
      for (char& ch : name) {
        if (ch == '-') ch = '_';
      }
      return name;
    });

// ------------------------------------------------------------ one layer

TEST(ModelBuilder, LayerOpsInExecutionOrder) {
  const fb::ModuleT m = Build("siglip-so400m-384", "layer");
  const std::vector<std::tuple<const char*, fb::OpKind>> expected = {
      {"l0.ln1", fb::OpKind::LayerNorm},
      {"l0.attn.qkv", fb::OpKind::MatMul},
      {"l0.attn.qkv_bias", fb::OpKind::BiasAdd},
      {"l0.attn.scores", fb::OpKind::AttentionScores},
      {"l0.attn.softmax", fb::OpKind::Softmax},
      {"l0.attn.ctx", fb::OpKind::AttentionContext},
      {"l0.attn.proj", fb::OpKind::MatMul},
      {"l0.attn.proj_bias", fb::OpKind::BiasAdd},
      {"l0.attn.residual", fb::OpKind::Add},
      {"l0.ln2", fb::OpKind::LayerNorm},
      {"l0.mlp.up", fb::OpKind::MatMul},
      {"l0.mlp.up_bias", fb::OpKind::BiasAdd},
      {"l0.mlp.gelu", fb::OpKind::Gelu},
      {"l0.mlp.down", fb::OpKind::MatMul},
      {"l0.mlp.down_bias", fb::OpKind::BiasAdd},
      {"l0.mlp.residual", fb::OpKind::Add},
  };
  ASSERT_EQ(m.ops.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(m.ops[i]->name, std::get<0>(expected[i])) << i;
    EXPECT_EQ(m.ops[i]->kind, std::get<1>(expected[i])) << i;
  }
}

TEST(ModelBuilder, MlpBlockValueNames) {
  const fb::ModuleT m = Build("siglip-so400m-384", "mlp-block");
  const std::vector<std::string> expected = {
      "x",
      "l0.ln2.gamma",
      "l0.ln2.beta",
      "l0.ln2.out",
      "l0.mlp.up.w",
      "l0.mlp.up.out",
      "l0.mlp.up_bias.b",
      "l0.mlp.up_bias.out",
      "l0.mlp.gelu.out",
      "l0.mlp.down.w",
      "l0.mlp.down.out",
      "l0.mlp.down_bias.b",
      "l0.mlp.down_bias.out",
      "l0.mlp.residual.out",
  };
  ASSERT_EQ(m.values.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(m.values[i]->name, expected[i]) << i;
  }
  // The residual reads the block's own input.
  EXPECT_EQ(OpNamed(m, "l0.mlp.residual").operands,
            (std::vector<uint32_t>{0, 12}));
}

TEST(ModelBuilder, SiglipLayerShapesAndAttributes) {
  const fb::ModuleT m = Build("siglip-so400m-384", "layer");
  using S = std::vector<int64_t>;
  EXPECT_EQ(ValueNamed(m, "x").shape, (S{729, 1152}));
  EXPECT_EQ(ValueNamed(m, "l0.ln1.gamma").shape, (S{1152}));
  EXPECT_EQ(ValueNamed(m, "l0.attn.qkv.w").shape, (S{1152, 3456}));
  EXPECT_EQ(ValueNamed(m, "l0.attn.qkv_bias.b").shape, (S{3456}));
  EXPECT_EQ(ValueNamed(m, "l0.attn.qkv_bias.out").shape, (S{729, 3456}));
  EXPECT_EQ(ValueNamed(m, "l0.attn.scores.out").shape, (S{1, 16, 729, 729}));
  EXPECT_EQ(ValueNamed(m, "l0.attn.softmax.out").shape, (S{1, 16, 729, 729}));
  EXPECT_EQ(ValueNamed(m, "l0.attn.ctx.out").shape, (S{729, 1152}));
  EXPECT_EQ(ValueNamed(m, "l0.attn.proj.w").shape, (S{1152, 1152}));
  EXPECT_EQ(ValueNamed(m, "l0.mlp.up.w").shape, (S{1152, 4304}));
  EXPECT_EQ(ValueNamed(m, "l0.mlp.gelu.out").shape, (S{729, 4304}));
  EXPECT_EQ(ValueNamed(m, "l0.mlp.down.w").shape, (S{4304, 1152}));
  EXPECT_EQ(ValueNamed(m, "l0.mlp.residual.out").shape, (S{729, 1152}));
  EXPECT_EQ(ValueNamed(m, "l0.mlp.residual.out").role,
            fb::ValueRole::Output);

  const fb::OperationT& ln1 = OpNamed(m, "l0.ln1");
  EXPECT_FLOAT_EQ(ln1.eps, 1e-6f);
  EXPECT_FLOAT_EQ(OpNamed(m, "l0.ln2").eps, 1e-6f);
  EXPECT_EQ(OpNamed(m, "l0.mlp.gelu").gelu, fb::GeluForm::Tanh);

  const fb::OperationT& scores = OpNamed(m, "l0.attn.scores");
  EXPECT_EQ(scores.heads, 16);
  EXPECT_EQ(scores.head_dim, 72);
  EXPECT_FLOAT_EQ(scores.scale, 1.0f / std::sqrt(72.0f));
  EXPECT_FLOAT_EQ(OpNamed(m, "l0.attn.softmax").scale, 1.0f);
  const fb::OperationT& ctx = OpNamed(m, "l0.attn.ctx");
  EXPECT_EQ(ctx.heads, 16);
  EXPECT_EQ(ctx.head_dim, 72);
  // probs and the same qkv the scores read.
  EXPECT_EQ(ctx.operands,
            (std::vector<uint32_t>{ValueNamed(m, "l0.attn.softmax.out").id,
                                   scores.operands[0]}));
  // Both residual adds read the layer input / the attention sum.
  EXPECT_EQ(OpNamed(m, "l0.attn.residual").operands[0], 0u);
  EXPECT_EQ(OpNamed(m, "l0.mlp.residual").operands[0],
            ValueNamed(m, "l0.attn.residual.out").id);
  EXPECT_EQ(OpNamed(m, "l0.ln2").operands[0],
            ValueNamed(m, "l0.attn.residual.out").id);
}

TEST(ModelBuilder, PresetAttributes) {
  fb::ModuleT vit = Build("vit-b16-224", "layer");
  EXPECT_FLOAT_EQ(OpNamed(vit, "l0.ln1").eps, 1e-12f);
  EXPECT_EQ(OpNamed(vit, "l0.mlp.gelu").gelu, fb::GeluForm::Erf);
  EXPECT_EQ(OpNamed(vit, "l0.attn.scores").head_dim, 64);
  EXPECT_EQ(ValueNamed(vit, "x").shape, (std::vector<int64_t>{197, 768}));
  EXPECT_EQ(ValueNamed(vit, "l0.mlp.up.w").shape,
            (std::vector<int64_t>{768, 3072}));

  fb::ModuleT clip = Build("clip-vit-l14-224", "layer");
  EXPECT_FLOAT_EQ(OpNamed(clip, "l0.ln1").eps, 1e-5f);
  EXPECT_EQ(OpNamed(clip, "l0.mlp.gelu").gelu, fb::GeluForm::Quick);
  EXPECT_EQ(OpNamed(clip, "l0.attn.scores").heads, 16);
  EXPECT_EQ(OpNamed(clip, "l0.attn.scores").head_dim, 64);
  EXPECT_EQ(ValueNamed(clip, "l0.attn.scores.out").shape,
            (std::vector<int64_t>{1, 16, 257, 257}));
}

// ------------------------------------------------------------ weights

TEST(ModelBuilder, WeightInits) {
  const fb::ModuleT m = Build("siglip-so400m-384", "layer");
  auto init = [&m](const std::string& name) -> const fb::WeightInitT& {
    const fb::ValueT& v = ValueNamed(m, name);
    EXPECT_EQ(v.role, fb::ValueRole::Weight) << name;
    EXPECT_EQ(v.init->seed, DeriveSeed(1, v.id)) << name;
    return *v.init;
  };
  const fb::WeightInitT& gamma = init("l0.ln1.gamma");
  EXPECT_EQ(gamma.distribution, fb::Distribution::Constant);
  EXPECT_EQ(gamma.mean, 1.0f);
  const fb::WeightInitT& beta = init("l0.ln2.beta");
  EXPECT_EQ(beta.distribution, fb::Distribution::Constant);
  EXPECT_EQ(beta.mean, 0.0f);

  const fb::WeightInitT& up = init("l0.mlp.up.w");
  EXPECT_EQ(up.distribution, fb::Distribution::Gaussian);
  EXPECT_EQ(up.mean, 0.0f);
  EXPECT_FLOAT_EQ(up.stddev, std::sqrt(2.0f / (1152 + 4304)));
  EXPECT_FLOAT_EQ(init("l0.attn.qkv.w").stddev,
                  std::sqrt(2.0f / (1152 + 3456)));
  EXPECT_FLOAT_EQ(init("l0.attn.proj.w").stddev,
                  std::sqrt(2.0f / (1152 + 1152)));

  const fb::WeightInitT& bias = init("l0.mlp.down_bias.b");
  EXPECT_EQ(bias.distribution, fb::Distribution::Gaussian);
  EXPECT_EQ(bias.mean, 0.0f);
  EXPECT_FLOAT_EQ(bias.stddev, 0.02f);

  const fb::ValueT& x = ValueNamed(m, "x");
  ASSERT_NE(x.init, nullptr);
  EXPECT_EQ(x.init->distribution, fb::Distribution::Gaussian);
  EXPECT_EQ(x.init->seed, DeriveSeed(2, 0));
  EXPECT_EQ(x.init->mean, 0.0f);
  EXPECT_EQ(x.init->stddev, 1.0f);
}

TEST(ModelBuilder, DeriveSeedIsSplitMix64) {
  // The first output of splitmix64 from state 0 (a published test value).
  EXPECT_EQ(DeriveSeed(0, 0), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(DeriveSeed(5, 3), DeriveSeed(6, 0));  // 5 ^ 3 == 6
  EXPECT_NE(DeriveSeed(1, 1), DeriveSeed(1, 2));
}

TEST(ModelBuilder, SeedOverridesChangeOnlySeeds) {
  ModelOverrides o;
  o.weight_seed = 77;
  o.input_seed = 78;
  const fb::ModuleT a = Build("vit-b16-224", "layer");
  const fb::ModuleT b = Build("vit-b16-224", "layer", o);
  ASSERT_EQ(a.values.size(), b.values.size());
  for (size_t i = 0; i < a.values.size(); ++i) {
    EXPECT_EQ(a.values[i]->name, b.values[i]->name);
    EXPECT_EQ(a.values[i]->shape, b.values[i]->shape);
    if (a.values[i]->init == nullptr) continue;
    const uint64_t base = i == 0 ? 78 : 77;
    EXPECT_EQ(b.values[i]->init->seed, DeriveSeed(base, i));
    EXPECT_NE(a.values[i]->init->seed, b.values[i]->init->seed);
  }
  EXPECT_EQ(b.model->weight_seed, 77u);
  EXPECT_EQ(b.model->input_seed, 78u);
}

// ------------------------------------------------------------ model

TEST(ModelBuilder, ModelChainsLayersWithStableIds) {
  const fb::ModuleT m = Build("clip-vit-l14-224", "model");
  ASSERT_EQ(m.ops.size(), 392u);
  // The embedding's 5 ops and 11 values come first.
  for (int layer = 0; layer < 24; ++layer) {
    const std::string p = "l" + std::to_string(layer) + ".";
    // Op ids follow 5 + 16 * layer + position in the layer.
    EXPECT_EQ(m.ops[5 + 16 * layer + 0]->name, p + "ln1");
    EXPECT_EQ(m.ops[5 + 16 * layer + 9]->name, p + "ln2");
    EXPECT_EQ(m.ops[5 + 16 * layer + 11]->name, p + "mlp.up_bias");
    EXPECT_EQ(m.ops[5 + 16 * layer + 12]->name, p + "mlp.gelu");
    // Value ids: 28 per layer after the embedding's.
    EXPECT_EQ(m.values[11 + 28 * layer]->name, p + "ln1.gamma");
    const uint32_t input =
        layer == 0 ? ValueNamed(m, "pre_ln.out").id
                   : ValueNamed(m, "l" + std::to_string(layer - 1) +
                                       ".mlp.residual.out")
                         .id;
    EXPECT_EQ(m.ops[5 + 16 * layer]->operands[0], input);
    EXPECT_EQ(m.ops[5 + 16 * layer + 8]->operands[0], input);  // residual
  }
  EXPECT_EQ(OpNamed(m, "head.class_rows").operands[0],
            ValueNamed(m, "l23.mlp.residual.out").id);
  EXPECT_EQ(ValueNamed(m, "l23.mlp.residual.out").role,
            fb::ValueRole::Activation);
  EXPECT_EQ(m.values.back()->name, "head.proj.out");
  EXPECT_EQ(m.values.back()->role, fb::ValueRole::Output);
}

// The segments of a CopyRows op as (operand, first, count, at).
std::vector<std::vector<int64_t>> Segments(const fb::OperationT& op) {
  std::vector<std::vector<int64_t>> segments;
  for (const auto& r : op.rows) {
    segments.push_back({r->operand, r->first, r->count, r->at});
  }
  return segments;
}

// ViT: the class token before each image's patches, the position table
// once per image, the class rows picked for LayerNorm and the classifier.
TEST(ModelBuilder, VitWholeModelAtBatch2) {
  ModelOverrides o;
  o.batch = 2;
  const fb::ModuleT m = Build("vit-b16-224", "model", o);
  EXPECT_EQ(ValueNamed(m, "pixel_values").shape,
            (std::vector<int64_t>{2, 3, 224, 224}));
  EXPECT_EQ(ValueNamed(m, "embed.patchify.out").shape,
            (std::vector<int64_t>{392, 768}));
  const fb::OperationT& concat = OpNamed(m, "embed.class_concat");
  EXPECT_EQ(concat.kind, fb::OpKind::CopyRows);
  EXPECT_EQ(concat.operands,
            (std::vector<uint32_t>{ValueNamed(m, "embed.class").id,
                                   ValueNamed(m, "embed.patch_bias.out").id}));
  EXPECT_EQ(Segments(concat), (std::vector<std::vector<int64_t>>{
                                  {0, 0, 1, 0},
                                  {1, 0, 196, 1},
                                  {0, 0, 1, 197},
                                  {1, 196, 196, 198}}));
  EXPECT_EQ(ValueNamed(m, "embed.position.w").shape,
            (std::vector<int64_t>{197, 768}));
  EXPECT_EQ(Segments(OpNamed(m, "embed.position_rows")),
            (std::vector<std::vector<int64_t>>{{0, 0, 197, 0},
                                               {0, 0, 197, 197}}));
  EXPECT_EQ(OpNamed(m, "l0.ln1").operands[0],
            ValueNamed(m, "embed.position.out").id);
  EXPECT_EQ(Segments(OpNamed(m, "head.class_rows")),
            (std::vector<std::vector<int64_t>>{{0, 0, 1, 0},
                                               {0, 197, 1, 1}}));
  EXPECT_EQ(OpNamed(m, "post_ln").operands[0],
            ValueNamed(m, "head.class_rows.out").id);
  EXPECT_EQ(m.values.back()->name, "head.classifier_bias.out");
  EXPECT_EQ(m.values.back()->shape, (std::vector<int64_t>{2, 1000}));
  for (const auto& op : m.ops)
    EXPECT_EQ(ir::CheckOpShapes(*op, m).message(), "") << op->name;
}

// CLIP: no patch bias, ln_pre before the layers, a projection without
// bias after the class token's LayerNorm; at batch 1 the position table is
// added as it is.
TEST(ModelBuilder, ClipWholeModel) {
  const fb::ModuleT m = Build("clip-vit-l14-224", "model");
  EXPECT_EQ(OpNamed(m, "embed.class_concat").operands[1],
            ValueNamed(m, "embed.patch.out").id);
  EXPECT_EQ(OpNamed(m, "embed.position").operands[1],
            ValueNamed(m, "embed.position.w").id);
  EXPECT_EQ(OpNamed(m, "pre_ln").operands[0],
            ValueNamed(m, "embed.position.out").id);
  EXPECT_EQ(ValueNamed(m, "head.proj.w").shape,
            (std::vector<int64_t>{1024, 768}));
  EXPECT_EQ(m.values.back()->shape, (std::vector<int64_t>{1, 768}));
  for (const auto& op : m.ops) {
    EXPECT_NE(op->name, "embed.patch_bias");
    EXPECT_NE(op->name, "embed.position_rows");
    EXPECT_EQ(ir::CheckOpShapes(*op, m).message(), "") << op->name;
  }
}

// SigLIP at batch 2: the position table and the probe's query are copied
// for each image; the head's output is one row per image.
TEST(ModelBuilder, SiglipWholeModelAtBatch2) {
  ModelOverrides o;
  o.batch = 2;
  o.repeat = true;
  const fb::ModuleT m = Build("siglip-so400m-384", "model", o);
  EXPECT_EQ(Segments(OpNamed(m, "embed.position_rows")),
            (std::vector<std::vector<int64_t>>{{0, 0, 729, 0},
                                               {0, 0, 729, 729}}));
  EXPECT_EQ(Segments(OpNamed(m, "head.attn.q_rows")),
            (std::vector<std::vector<int64_t>>{{0, 0, 1, 0},
                                               {0, 0, 1, 1}}));
  EXPECT_EQ(OpNamed(m, "head.attn.scores").operands[0],
            ValueNamed(m, "head.attn.q_rows.out").id);
  EXPECT_EQ(ValueNamed(m, "head.attn.scores.out").shape,
            (std::vector<int64_t>{2, 16, 1, 729}));
  EXPECT_EQ(m.values.back()->shape, (std::vector<int64_t>{2, 1152}));
  for (const auto& op : m.ops)
    EXPECT_EQ(ir::CheckOpShapes(*op, m).message(), "") << op->name;
}

// SigLIP's whole model: image -> patches (host) -> patch embedding ->
// position add -> the layers -> post-LayerNorm -> the MAP head.
TEST(ModelBuilder, SiglipWholeModel) {
  const fb::ModuleT m = Build("siglip-so400m-384", "model");
  ASSERT_EQ(m.ops.size(), 453u);
  EXPECT_EQ(ValueNamed(m, "pixel_values").shape,
            (std::vector<int64_t>{1, 3, 378, 378}));
  EXPECT_EQ(OpNamed(m, "embed.patchify").patch, 14);
  EXPECT_EQ(ValueNamed(m, "embed.patchify.out").shape,
            (std::vector<int64_t>{729, 588}));
  EXPECT_EQ(ValueNamed(m, "embed.patch.w").shape,
            (std::vector<int64_t>{588, 1152}));
  EXPECT_EQ(ValueNamed(m, "embed.position.w").shape,
            (std::vector<int64_t>{729, 1152}));
  // The layers read the embedded tokens; the head reads the last layer.
  EXPECT_EQ(OpNamed(m, "l0.ln1").operands[0],
            ValueNamed(m, "embed.position.out").id);
  EXPECT_EQ(OpNamed(m, "post_ln").operands[0],
            ValueNamed(m, "l26.mlp.residual.out").id);
  EXPECT_EQ(ValueNamed(m, "head.probe").shape,
            (std::vector<int64_t>{1, 1152}));
  EXPECT_EQ(ValueNamed(m, "head.attn.q_bias.out").shape,
            (std::vector<int64_t>{1, 1152}));
  EXPECT_EQ(ValueNamed(m, "head.attn.kv_bias.out").shape,
            (std::vector<int64_t>{729, 2304}));
  const fb::OperationT& scores = OpNamed(m, "head.attn.scores");
  EXPECT_EQ(scores.operands,
            (std::vector<uint32_t>{ValueNamed(m, "head.attn.q_bias.out").id,
                                   ValueNamed(m, "head.attn.kv_bias.out").id}));
  EXPECT_EQ(scores.heads, 16);
  EXPECT_EQ(scores.head_dim, 72);
  EXPECT_EQ(ValueNamed(m, "head.attn.scores.out").shape,
            (std::vector<int64_t>{1, 16, 1, 729}));
  EXPECT_EQ(ValueNamed(m, "head.attn.ctx.out").shape,
            (std::vector<int64_t>{1, 1152}));
  EXPECT_EQ(ValueNamed(m, "head.mlp.up.out").shape,
            (std::vector<int64_t>{1, 4304}));
  // h = ctx' + MLP(LayerNorm(ctx')), ctx' the out-projection.
  EXPECT_EQ(OpNamed(m, "head.mlp.residual").operands[0],
            ValueNamed(m, "head.attn.proj_bias.out").id);
  EXPECT_EQ(m.values.back()->name, "head.mlp.residual.out");
  EXPECT_EQ(m.values.back()->shape, (std::vector<int64_t>{1, 1152}));
  EXPECT_EQ(m.values.back()->role, fb::ValueRole::Output);
}

// Rolled, the 27 layers are one body; the embedding and the head stay
// outside it.
TEST(ModelBuilder, SiglipWholeModelRolled) {
  ModelOverrides o;
  o.repeat = true;
  const fb::ModuleT m = Build("siglip-so400m-384", "model", o);
  EXPECT_EQ(m.ops.size(), 4u + 16u + 17u);
  ASSERT_EQ(m.repeats.size(), 1u);
  EXPECT_EQ(m.repeats[0]->count, 27u);
  EXPECT_EQ(m.repeats[0]->carried_in, ValueNamed(m, "embed.position.out").id);
  EXPECT_EQ(OpNamed(m, "post_ln").operands[0], m.repeats[0]->carried_out);
  // The written-out values: 40 + 28 per layer + the twins of 26 layers'
  // 12 weights.
  EXPECT_EQ(m.values.size(), 8u + 28u + 32u + 26u * 12u);
  EXPECT_EQ(m.repeats[0]->iteration_weights.size(), 26u * 12u);
}

// The whole model's own limit: a square patch grid.
TEST(ModelBuilder, SiglipWholeModelLimits) {
  ModelOverrides o;
  o.tokens = 10;
  fb::ModuleT m;
  EXPECT_THAT(BuildModel("siglip-so400m-384", "model", o, &m).message(),
              HasSubstr("--tokens=10: --part=model needs a square grid"));
  // The layers alone have no such limit.
  EXPECT_TRUE(BuildModel("siglip-so400m-384", "layer", o, &m).ok());
  // With a class token, the patches are the tokens less one.
  o.tokens = 16;
  EXPECT_THAT(BuildModel("vit-b16-224", "model", o, &m).message(),
              HasSubstr("--tokens=16: --part=model needs a square grid of "
                        "patches plus the class token"));
  o.tokens = 17;
  o.patch = 4;
  ASSERT_TRUE(BuildModel("vit-b16-224", "model", o, &m).ok());
  EXPECT_EQ(ValueNamed(m, "pixel_values").shape,
            (std::vector<int64_t>{1, 3, 16, 16}));
}

TEST(ModelBuilder, ModelInfo) {
  const fb::ModuleT m = Build("siglip-so400m-384", "model");
  ASSERT_NE(m.model, nullptr);
  EXPECT_EQ(m.model->preset, "siglip-so400m-384");
  EXPECT_EQ(m.model->part, "model");
  EXPECT_EQ(m.model->layers, 27);
  EXPECT_EQ(m.model->batch, 1);
  EXPECT_EQ(m.model->tokens, 729);
  EXPECT_EQ(m.model->width, 1152);
  EXPECT_EQ(m.model->mlp_width, 4304);
  EXPECT_EQ(m.model->heads, 16);
  EXPECT_EQ(m.model->weight_seed, 1u);
  EXPECT_EQ(m.model->input_seed, 2u);

  EXPECT_EQ(Build("siglip-so400m-384", "layer").model->layers, 1);
  EXPECT_EQ(Build("siglip-so400m-384", "mlp-block").model->part, "mlp-block");
  EXPECT_EQ(Build("siglip-so400m-384", "mlp-block").model->layers, 1);
}

TEST(ModelBuilder, LeavesOtherModuleFieldsAlone) {
  fb::ModuleT m;
  m.schema_version = 7;
  m.producer = "test";
  m.target = std::make_unique<fb::TargetT>();
  m.target->name = "tiny";
  ASSERT_TRUE(BuildModel("vit-b16-224", "layer", {}, &m).ok());
  EXPECT_EQ(m.schema_version, 7u);
  EXPECT_EQ(m.producer, "test");
  ASSERT_NE(m.target, nullptr);
  EXPECT_EQ(m.target->name, "tiny");
  // Rebuilding replaces the graph instead of appending to it.
  ASSERT_TRUE(BuildModel("vit-b16-224", "mlp-block", {}, &m).ok());
  EXPECT_EQ(m.values.size(), 14u);
  EXPECT_EQ(m.ops.size(), 7u);
}

// ------------------------------------------------------------ overrides

TEST(ModelBuilder, SizeOverrides) {
  ModelOverrides o;
  o.tokens = 16;
  o.patch = 4;
  o.width = 64;
  o.mlp_width = 96;
  o.heads = 4;
  o.layers = 3;
  o.eps = 1e-3f;
  o.gelu = fb::GeluForm::Erf;
  const fb::ModuleT m = Build("siglip-so400m-384", "model", o);
  EXPECT_EQ(m.ops.size(), 4u + 48u + 17u);
  EXPECT_EQ(m.values.size(), 8u + 84u + 32u);
  EXPECT_EQ(ValueNamed(m, "pixel_values").shape,
            (std::vector<int64_t>{1, 3, 16, 16}));
  EXPECT_EQ(ValueNamed(m, "embed.patchify.out").shape,
            (std::vector<int64_t>{16, 48}));
  EXPECT_EQ(ValueNamed(m, "l2.attn.qkv.w").shape,
            (std::vector<int64_t>{64, 192}));
  EXPECT_EQ(ValueNamed(m, "l1.mlp.gelu.out").shape,
            (std::vector<int64_t>{16, 96}));
  EXPECT_EQ(ValueNamed(m, "l0.attn.scores.out").shape,
            (std::vector<int64_t>{1, 4, 16, 16}));
  EXPECT_EQ(OpNamed(m, "l0.attn.scores").head_dim, 16);
  EXPECT_FLOAT_EQ(OpNamed(m, "l0.attn.scores").scale, 0.25f);
  EXPECT_FLOAT_EQ(OpNamed(m, "l2.ln2").eps, 1e-3f);
  EXPECT_EQ(OpNamed(m, "l2.mlp.gelu").gelu, fb::GeluForm::Erf);
  EXPECT_EQ(m.model->layers, 3);
  EXPECT_EQ(m.model->width, 64);
  EXPECT_EQ(m.model->preset, "siglip-so400m-384");
  for (const auto& op : m.ops)
    EXPECT_EQ(ir::CheckOpShapes(*op, m).message(), "");
}

// --layers counts layers of a model and blocks of an MLP block; one layer
// stays one layer.
TEST(ModelBuilder, LayersOverrideOfEachPart) {
  ModelOverrides o;
  o.layers = 5;
  EXPECT_EQ(Build("vit-b16-224", "mlp-block", o).ops.size(), 35u);
  EXPECT_EQ(Build("vit-b16-224", "model", o).ops.size(), 5u + 80u + 4u);
  EXPECT_EQ(Build("vit-b16-224", "layer", o).ops.size(), 16u);
  EXPECT_EQ(Build("vit-b16-224", "mlp-block").ops.size(), 7u);
}

TEST(ModelBuilder, Batch2) {
  ModelOverrides o;
  o.batch = 2;
  for (const char* part : {"mlp-block", "layer"}) {
    const fb::ModuleT m = Build("siglip-so400m-384", part, o);
    EXPECT_EQ(m.model->batch, 2);
    EXPECT_EQ(ValueNamed(m, "x").shape, (std::vector<int64_t>{1458, 1152}));
    EXPECT_EQ(ValueNamed(m, "l0.mlp.up.out").shape,
              (std::vector<int64_t>{1458, 4304}));
    EXPECT_EQ(m.values.back()->shape, (std::vector<int64_t>{1458, 1152}));
    for (const auto& op : m.ops)
      EXPECT_EQ(ir::CheckOpShapes(*op, m).message(), "") << part;
  }
  const fb::ModuleT m = Build("siglip-so400m-384", "layer", o);
  EXPECT_EQ(ValueNamed(m, "l0.attn.qkv_bias.out").shape,
            (std::vector<int64_t>{1458, 3456}));
  EXPECT_EQ(ValueNamed(m, "l0.attn.scores.out").shape,
            (std::vector<int64_t>{2, 16, 729, 729}));
  EXPECT_EQ(ValueNamed(m, "l0.attn.ctx.out").shape,
            (std::vector<int64_t>{1458, 1152}));
  // Batch does not change the weights.
  EXPECT_EQ(ValueNamed(m, "l0.attn.qkv.w").shape,
            (std::vector<int64_t>{1152, 3456}));
}

// The graph input and output are declared in the PyTorch module's shapes
// where those are not tilec's: a part's token rows [B*T, D] are [B, T, D]
// there; the whole model's image and pooled output are the same in both.
TEST(ModelBuilder, DeclaredShapesAreThePyTorchModules) {
  ModelOverrides o;
  for (const char* part : {"mlp-block", "layer"}) {
    for (int64_t batch : {1, 2}) {
      o.batch = batch;
      const fb::ModuleT m = Build("siglip-so400m-384", part, o);
      const std::vector<int64_t> tokens = {batch, 729, 1152};
      EXPECT_EQ(ValueNamed(m, "x").declared_shape, tokens) << part;
      EXPECT_EQ(m.values.back()->role, fb::ValueRole::Output);
      EXPECT_EQ(m.values.back()->declared_shape, tokens) << part;
      for (const auto& v : m.values) {
        if (v->role != fb::ValueRole::Input &&
            v->role != fb::ValueRole::Output) {
          EXPECT_TRUE(v->declared_shape.empty()) << part << " " << v->name;
        }
      }
    }
  }
  o.batch = 2;
  o.layers = 1;
  for (const char* preset : {"siglip-so400m-384", "vit-b16-224"}) {
    const fb::ModuleT m = Build(preset, "model", o);
    for (const auto& v : m.values) {
      EXPECT_TRUE(v->declared_shape.empty()) << preset << " " << v->name;
    }
  }
}

TEST(ModelBuilder, ConfigApi) {
  EXPECT_EQ(PresetNames(), (std::vector<std::string>{
                               "siglip-so400m-384", "vit-b16-224",
                               "clip-vit-l14-224"}));
  ModelConfig c;
  ASSERT_TRUE(PresetConfig("clip-vit-l14-224", &c).ok());
  EXPECT_EQ(c.tokens, 257);
  EXPECT_EQ(c.width, 1024);
  EXPECT_EQ(c.mlp_width, 4096);
  EXPECT_EQ(c.heads, 16);
  EXPECT_EQ(c.layers, 24);
  EXPECT_EQ(c.batch, 1);
  EXPECT_EQ(c.head_dim(), 64);
  EXPECT_EQ(c.weight_seed, 1u);
  EXPECT_EQ(c.input_seed, 2u);

  ModelPart part;
  ASSERT_TRUE(ParseModelPart("mlp-block", &part).ok());
  EXPECT_EQ(part, ModelPart::kMlpBlock);
  EXPECT_EQ(ModelPartName(ModelPart::kLayer), "layer");

  fb::GeluForm form;
  ASSERT_TRUE(ParseGeluForm("quick", &form).ok());
  EXPECT_EQ(form, fb::GeluForm::Quick);
  EXPECT_EQ(GeluFormName(fb::GeluForm::Erf), "erf");
  EXPECT_THAT(ParseGeluForm("relu", &form).message(), HasSubstr("--gelu=relu"));

  // The struct form gives the same graph as preset + part names.
  fb::ModuleT a, b;
  ASSERT_TRUE(BuildModel(c, ModelPart::kLayer, &a).ok());
  ASSERT_TRUE(BuildModel("clip-vit-l14-224", "layer", {}, &b).ok());
  EXPECT_EQ(Pack(a), Pack(b));
}

// ------------------------------------------------------------ errors

std::string BuildError(std::string_view preset, std::string_view part,
                       const ModelOverrides& o = {}) {
  fb::ModuleT m;
  return BuildModel(preset, part, o, &m).message();
}

TEST(ModelBuilder, UnknownPresetAndPart) {
  EXPECT_THAT(BuildError("resnet-50", "layer"),
              HasSubstr("--preset=resnet-50"));
  EXPECT_THAT(BuildError("resnet-50", "layer"),
              HasSubstr("siglip-so400m-384"));  // lists the known ones
  EXPECT_THAT(BuildError("vit-b16-224", "block"), HasSubstr("--part=block"));
}

TEST(ModelBuilder, InconsistentSizes) {
  ModelOverrides o;
  o.heads = 7;
  EXPECT_THAT(BuildError("siglip-so400m-384", "layer", o),
              HasSubstr("--width=1152: not divisible by --heads=7"));

  struct Bad {
    std::optional<int64_t> ModelOverrides::*field;
    int64_t value;
    const char* message;
  };
  const Bad bad[] = {
      {&ModelOverrides::tokens, 0, "--tokens=0: must be positive"},
      {&ModelOverrides::width, -8, "--width=-8: must be positive"},
      {&ModelOverrides::mlp_width, 0, "--mlp_width=0: must be positive"},
      {&ModelOverrides::heads, 0, "--heads=0: must be positive"},
      {&ModelOverrides::layers, 0, "--layers=0: must be positive"},
      {&ModelOverrides::batch, -1, "--batch=-1: must be positive"},
      {&ModelOverrides::tokens, int64_t{1} << 31,
       "--tokens=2147483648: must be at most 2147483647"},
      {&ModelOverrides::layers, 100000, "--layers=100000: must be at most"},
  };
  for (const Bad& b : bad) {
    ModelOverrides over;
    over.*b.field = b.value;
    EXPECT_THAT(BuildError("siglip-so400m-384", "model", over),
                HasSubstr(b.message));
  }
}

// --layers=N with --part=mlp-block chains N blocks: each block's residual
// is the next block's input (its LayerNorm and its residual add).
TEST(ModelBuilder, ConsecutiveMlpBlocks) {
  ModelOverrides o;
  o.layers = 2;
  const fb::ModuleT m = Build("siglip-so400m-384", "mlp-block", o);
  EXPECT_EQ(m.model->layers, 2);
  ASSERT_EQ(m.ops.size(), 14u);
  const uint32_t residual0 = ValueNamed(m, "l0.mlp.residual.out").id;
  int readers = 0;
  for (const auto& op : m.ops) {
    if (op->name != "l1.ln2" && op->name != "l1.mlp.residual") continue;
    EXPECT_EQ(op->operands[0], residual0) << op->name;
    ++readers;
  }
  EXPECT_EQ(readers, 2);
  EXPECT_EQ(ValueNamed(m, "l1.mlp.residual.out").role, fb::ValueRole::Output);
  EXPECT_EQ(ValueNamed(m, "l0.mlp.residual.out").role,
            fb::ValueRole::Activation);
}

TEST(ModelBuilder, BadEps) {
  for (float eps : {0.0f, -1.0f, std::nanf(""), INFINITY}) {
    ModelOverrides o;
    o.eps = eps;
    EXPECT_THAT(BuildError("vit-b16-224", "layer", o), HasSubstr("--eps="))
        << eps;
  }
  ModelOverrides o;
  o.eps = -1.0f;
  EXPECT_THAT(BuildError("vit-b16-224", "layer", o),
              HasSubstr("--eps=-1: must be positive and finite"));
}

TEST(ModelBuilder, TooLargeTensors) {
  ModelOverrides o;
  o.tokens = 2000000000;
  o.batch = 2000000;
  EXPECT_THAT(BuildError("vit-b16-224", "layer", o), HasSubstr("2^31"));
  ModelOverrides scores;
  scores.tokens = 30000;  // fine as rows, too many scores
  EXPECT_THAT(BuildError("vit-b16-224", "layer", scores),
              HasSubstr("attention scores"));
}

TEST(ModelBuilder, ErrorLeavesModuleUntouched) {
  fb::ModuleT m = Build("vit-b16-224", "layer");
  const std::vector<uint8_t> before = Pack(m);
  ModelOverrides o;
  o.heads = 5;
  EXPECT_FALSE(BuildModel("vit-b16-224", "model", o, &m).ok());
  EXPECT_FALSE(BuildModel("nope", "model", {}, &m).ok());
  EXPECT_EQ(Pack(m), before);
}

}  // namespace
}  // namespace tilec::passes
