#include "passes/onnx/import_onnx.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>

#include "formats/op_shapes.h"
#include "passes/onnx/onnx_graph.h"
#include "passes/onnx/onnx_tensor.h"

namespace tilec::passes {
namespace {

using ::onnx::TensorProto;
using ::testing::HasSubstr;

// Builds small models node by node.
class ModelBuilder {
 public:
  ModelBuilder() {
    model_.set_ir_version(8);
    auto* opset = model_.add_opset_import();
    opset->set_domain("");
    opset->set_version(17);
  }
  void Input(const std::string& name, std::vector<int64_t> shape,
             int32_t type = TensorProto::FLOAT) {
    Declare(model_.mutable_graph()->add_input(), name, shape, type);
  }
  // An input whose dims named in `symbolic` (by index) are dim_params.
  void SymbolicInput(const std::string& name, std::vector<int64_t> shape,
                     const std::map<int, std::string>& symbolic) {
    auto* v = model_.mutable_graph()->add_input();
    Declare(v, name, shape);
    auto* dims = v->mutable_type()->mutable_tensor_type()->mutable_shape();
    for (const auto& [index, param] : symbolic) {
      dims->mutable_dim(index)->set_dim_param(param);
    }
  }
  void Output(const std::string& name, std::vector<int64_t> shape) {
    Declare(model_.mutable_graph()->add_output(), name, shape);
  }
  void Constant(const std::string& name, std::vector<int64_t> shape,
                std::vector<float> values) {
    TensorProto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(TensorProto::FLOAT);
    for (int64_t d : shape) t->add_dims(d);
    for (float v : values) t->add_float_data(v);
  }
  void Scalar(const std::string& name, float v) { Constant(name, {}, {v}); }
  // An INT64 initializer (indices, shapes, slice bounds); `shape` {} is a
  // scalar.
  void Ints(const std::string& name, std::vector<int64_t> shape,
            std::vector<int64_t> values) {
    TensorProto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(TensorProto::INT64);
    for (int64_t d : shape) t->add_dims(d);
    for (int64_t v : values) t->add_int64_data(v);
  }
  ::onnx::NodeProto* Node(const std::string& op, std::vector<std::string> in,
                          const std::string& out) {
    auto* n = model_.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(out + "_node");
    for (const auto& i : in) n->add_input(i);
    n->add_output(out);
    return n;
  }
  ::onnx::ModelProto& model() { return model_; }

 private:
  static void Declare(::onnx::ValueInfoProto* v, const std::string& name,
                      const std::vector<int64_t>& shape,
                      int32_t type = TensorProto::FLOAT) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(type);
    for (int64_t d : shape) tt->mutable_shape()->add_dim()->set_dim_value(d);
  }
  ::onnx::ModelProto model_;
};

Status Import(const ::onnx::ModelProto& model, fb::ModuleT* module,
              std::string* sidecar = nullptr, int64_t batch = 1) {
  std::string ignored;
  OnnxImportOptions options;
  options.model_name = "m.onnx";
  options.batch = batch;
  return ImportOnnx(model, options, module, sidecar ? sidecar : &ignored);
}

// A weight's numbers as the sidecar holds them.
std::vector<float> SidecarFloats(const fb::ValueT& v,
                                 const std::string& sidecar) {
  std::vector<float> data(v.sidecar->bytes / sizeof(float));
  std::memcpy(data.data(), sidecar.data() + v.sidecar->offset,
              v.sidecar->bytes);
  return data;
}

std::vector<fb::OpKind> Kinds(const fb::ModuleT& module) {
  std::vector<fb::OpKind> kinds;
  for (const auto& op : module.ops) kinds.push_back(op->kind);
  return kinds;
}

// The tanh GELU with its factors shuffled and x^3 written as x*x*x, after a
// Linear whose reshape target comes from Shape arithmetic.
TEST(ImportOnnx, TanhGeluInAnyOrderAfterFoldedReshape) {
  ModelBuilder b;
  b.Input("x", {2, 3, 4});
  b.Constant("w", {4, 4}, std::vector<float>(16, 0.5f));
  b.Node("MatMul", {"x", "w"}, "h");
  b.Node("Shape", {"h"}, "shape");
  b.Node("Reshape", {"h", "shape"}, "hr");  // a no-op view, shape folded
  b.Scalar("half", 0.5f);
  b.Scalar("k", static_cast<float>(std::sqrt(2.0 / M_PI)));
  b.Scalar("c", 0.044715f);
  b.Scalar("one", 1.0f);
  b.Node("Mul", {"hr", "hr"}, "x2");
  b.Node("Mul", {"x2", "hr"}, "x3");
  b.Node("Mul", {"c", "x3"}, "cx3");
  b.Node("Add", {"hr", "cx3"}, "inner");
  b.Node("Mul", {"inner", "k"}, "arg");
  b.Node("Tanh", {"arg"}, "t");
  b.Node("Add", {"one", "t"}, "onep");
  b.Node("Mul", {"half", "onep"}, "halfp");
  b.Node("Mul", {"halfp", "hr"}, "y");
  b.Output("y", {2, 3, 4});
  fb::ModuleT module;
  ASSERT_TRUE(Import(b.model(), &module).ok());
  EXPECT_EQ(Kinds(module),
            (std::vector<fb::OpKind>{fb::OpKind::MatMul, fb::OpKind::Gelu}));
  EXPECT_EQ(module.ops[1]->gelu, fb::GeluForm::Tanh);
  EXPECT_EQ(module.values.back()->name, "y");
  EXPECT_EQ(module.values.back()->shape, (std::vector<int64_t>{6, 4}));
  for (const auto& op : module.ops) {
    EXPECT_EQ(ir::CheckOpShapes(*op, module).message(), "");
  }
}

// A decomposed LayerNorm whose gamma is a scalar-free [w] constant and whose
// epsilon is added on the left.
TEST(ImportOnnx, DecomposedLayerNormWithoutBeta) {
  ModelBuilder b;
  b.Input("x", {5, 8});
  b.Constant("gamma", {8}, std::vector<float>(8, 2.0f));
  b.Scalar("eps", 1e-6f);
  b.Scalar("two", 2.0f);
  b.Node("ReduceMean", {"x"}, "mean")->add_attribute()->CopyFrom([] {
    ::onnx::AttributeProto a;
    a.set_name("axes");
    a.set_type(::onnx::AttributeProto::INTS);
    a.add_ints(-1);
    return a;
  }());
  b.Node("Sub", {"x", "mean"}, "d");
  b.Node("Pow", {"d", "two"}, "d2");
  b.Node("ReduceMean", {"d2"}, "var")
      ->add_attribute()
      ->CopyFrom(b.model().graph().node(0).attribute(0));
  b.Node("Add", {"eps", "var"}, "ve");
  b.Node("Sqrt", {"ve"}, "std");
  b.Node("Div", {"d", "std"}, "n");
  b.Node("Mul", {"n", "gamma"}, "y");
  b.Output("y", {5, 8});
  fb::ModuleT module;
  std::string sidecar;
  const Status s = Import(b.model(), &module, &sidecar);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(Kinds(module), std::vector<fb::OpKind>{fb::OpKind::LayerNorm});
  EXPECT_FLOAT_EQ(module.ops[0]->eps, 1e-6f);
  // gamma is uniform, beta missing: both become Constant inits, no sidecar.
  EXPECT_TRUE(sidecar.empty());
  const fb::ValueT& beta = *module.values[module.ops[0]->operands[2]];
  ASSERT_NE(beta.init, nullptr);
  EXPECT_EQ(beta.init->distribution, fb::Distribution::Constant);
  EXPECT_EQ(beta.init->mean, 0.0f);
}

// CLIP's form: q = q_proj(x) * scale with q_proj a Gemm (transB=1) on a 2-D
// input, k and v as MatMul + Add, k transposed by permute(0, 2, 3, 1).
TEST(ImportOnnx, AttentionWithScaledGemmQueryFusesQkv) {
  constexpr int64_t kT = 4, kH = 2, kD = 4, kW = kH * kD;
  ModelBuilder b;
  b.Input("x", {kT, kW});
  std::vector<float> wq(kW * kW), wk(kW * kW), wv(kW * kW), bias(kW);
  for (int i = 0; i < kW * kW; ++i) {
    wq[i] = 0.01f * i;  // [out, in] for the Gemm
    wk[i] = -0.02f * i;
    wv[i] = 0.03f * (i % 7);
  }
  for (int i = 0; i < kW; ++i) bias[i] = 0.1f * i;
  b.Constant("wq", {kW, kW}, wq);
  b.Constant("wk", {kW, kW}, wk);
  b.Constant("wv", {kW, kW}, wv);
  b.Constant("bq", {kW}, bias);
  b.Constant("bv", {kW}, bias);
  b.Constant("heads", {4}, {1, kT, kH, kD});
  b.Constant("flat", {2}, {kT, kW});
  b.Scalar("scale", 0.5f);
  auto perm = [](::onnx::NodeProto* n, std::vector<int64_t> p) {
    auto* a = n->add_attribute();
    a->set_name("perm");
    a->set_type(::onnx::AttributeProto::INTS);
    for (int64_t v : p) a->add_ints(v);
  };
  auto* gemm = b.Node("Gemm", {"x", "wq", "bq"}, "q0");
  auto* trans_b = gemm->add_attribute();
  trans_b->set_name("transB");
  trans_b->set_type(::onnx::AttributeProto::INT);
  trans_b->set_i(1);
  b.Node("Mul", {"q0", "scale"}, "q1");
  b.Node("MatMul", {"x", "wk"}, "k0");
  b.Node("MatMul", {"x", "wv"}, "v0");
  b.Node("Add", {"bv", "v0"}, "v1");
  b.Node("Reshape", {"q1", "heads"}, "q2");
  b.Node("Reshape", {"k0", "heads"}, "k2");
  b.Node("Reshape", {"v1", "heads"}, "v2");
  perm(b.Node("Transpose", {"q2"}, "q3"), {0, 2, 1, 3});
  perm(b.Node("Transpose", {"k2"}, "k3"), {0, 2, 3, 1});
  perm(b.Node("Transpose", {"v2"}, "v3"), {0, 2, 1, 3});
  b.Node("MatMul", {"q3", "k3"}, "s");
  b.Node("Softmax", {"s"}, "p");
  b.Node("MatMul", {"p", "v3"}, "c");
  perm(b.Node("Transpose", {"c"}, "c1"), {0, 2, 1, 3});
  b.Node("Reshape", {"c1", "flat"}, "y");
  b.Output("y", {kT, kW});
  fb::ModuleT module;
  std::string sidecar;
  const Status s = Import(b.model(), &module, &sidecar);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(Kinds(module), (std::vector<fb::OpKind>{
                               fb::OpKind::MatMul, fb::OpKind::BiasAdd,
                               fb::OpKind::AttentionScores, fb::OpKind::Softmax,
                               fb::OpKind::AttentionContext}));
  EXPECT_FLOAT_EQ(module.ops[2]->scale, 0.5f);
  EXPECT_EQ(module.ops[2]->heads, kH);
  EXPECT_EQ(module.ops[2]->head_dim, kD);
  for (const auto& op : module.ops) {
    EXPECT_EQ(ir::CheckOpShapes(*op, module).message(), "");
  }
  // The fused weight [in, 3*out]: q is the Gemm weight transposed, k and v
  // the MatMul weights as they are; the fused bias has k's zeros.
  const fb::ValueT& w = *module.values[module.ops[0]->operands[1]];
  ASSERT_NE(w.sidecar, nullptr);
  std::vector<float> fused(kW * 3 * kW);
  std::memcpy(fused.data(), sidecar.data() + w.sidecar->offset,
              fused.size() * sizeof(float));
  for (int64_t i = 0; i < kW; ++i) {
    for (int64_t o = 0; o < kW; ++o) {
      EXPECT_EQ(fused[i * 3 * kW + o], wq[o * kW + i]);
      EXPECT_EQ(fused[i * 3 * kW + kW + o], wk[i * kW + o]);
      EXPECT_EQ(fused[i * 3 * kW + 2 * kW + o], wv[i * kW + o]);
    }
  }
  const fb::ValueT& bqkv = *module.values[module.ops[1]->operands[1]];
  std::vector<float> fused_bias(3 * kW);
  std::memcpy(fused_bias.data(), sidecar.data() + bqkv.sidecar->offset,
              fused_bias.size() * sizeof(float));
  EXPECT_EQ(fused_bias[kW + 3], 0.0f);
  EXPECT_EQ(fused_bias[2 * kW + 3], bias[3]);
}

// A CopyRows op's segments as "operand:first+count@at".
std::vector<std::string> Segments(const fb::OperationT& op) {
  std::vector<std::string> out;
  for (const ir::RowSegment& r : ir::RowSegments(op)) {
    out.push_back(std::to_string(r.operand) + ":" + std::to_string(r.first) +
                  "+" + std::to_string(r.count) + "@" + std::to_string(r.at));
  }
  return out;
}

::onnx::AttributeProto IntAttr(const std::string& name, int64_t v) {
  ::onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(::onnx::AttributeProto::INT);
  a.set_i(v);
  return a;
}

// Hugging Face ViT's embedding and pooling at batch 2: a [1, 1, D] class
// token expanded to [2, 1, D] and concatenated before 3 patches, a
// [1, 4, D] position table added, token 0 picked for a classifier.
TEST(ImportOnnx, ClassTokenConcatPositionsAndPickAreRowCopies) {
  ModelBuilder b;
  b.Input("patches", {2, 3, 4});
  b.Constant("cls", {1, 1, 4}, {1, 2, 3, 4});
  b.Ints("batch_shape", {3}, {2, 1, 4});
  b.Node("Expand", {"cls", "batch_shape"}, "cls_b");
  b.Node("Concat", {"cls_b", "patches"}, "tokens")
      ->add_attribute()
      ->CopyFrom(IntAttr("axis", 1));
  std::vector<float> pos(16);
  for (int i = 0; i < 16; ++i) pos[i] = 0.01f * i;
  b.Constant("pos", {1, 4, 4}, pos);
  b.Node("Add", {"tokens", "pos"}, "x");
  b.Ints("zero", {}, {0});
  b.Node("Gather", {"x", "zero"}, "pooled")
      ->add_attribute()
      ->CopyFrom(IntAttr("axis", 1));
  b.Constant("w", {4, 3}, std::vector<float>(12, 0.5f));
  b.Node("MatMul", {"pooled", "w"}, "logits");
  b.Output("logits", {2, 3});
  fb::ModuleT module;
  const Status s = Import(b.model(), &module);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(Kinds(module),
            (std::vector<fb::OpKind>{fb::OpKind::CopyRows, fb::OpKind::CopyRows,
                                     fb::OpKind::Add, fb::OpKind::CopyRows,
                                     fb::OpKind::MatMul}));
  // The class token's one row before each image's 3 patch rows.
  EXPECT_EQ(
      Segments(*module.ops[0]),
      (std::vector<std::string>{"0:0+1@0", "1:0+3@1", "0:0+1@4", "1:3+3@5"}));
  EXPECT_EQ(module.values[module.ops[0]->operands[0]]->shape,
            (std::vector<int64_t>{1, 4}));
  // The position table once per image.
  EXPECT_EQ(Segments(*module.ops[1]),
            (std::vector<std::string>{"0:0+4@0", "0:0+4@4"}));
  EXPECT_EQ(module.values[module.ops[1]->operands[0]]->shape,
            (std::vector<int64_t>{4, 4}));
  // Row b * 4 of each image.
  EXPECT_EQ(Segments(*module.ops[3]),
            (std::vector<std::string>{"0:0+1@0", "0:4+1@1"}));
  for (const auto& op : module.ops) {
    EXPECT_EQ(ir::CheckOpShapes(*op, module).message(), "");
  }
}

// x[:, 3:, :] of [2, 5, 4] (the end INT64_MAX, as exporters write an open
// end), x[:, -1:] by a 1-element negative Gather index, and x[1] (axis 0:
// an image's rows).
TEST(ImportOnnx, SliceAndGatherOfTokensPickRowsPerImage) {
  ModelBuilder b;
  b.Input("x", {2, 5, 4});
  b.Ints("starts", {1}, {3});
  b.Ints("ends", {1}, {std::numeric_limits<int64_t>::max()});
  b.Ints("axes", {1}, {1});
  b.Node("Slice", {"x", "starts", "ends", "axes"}, "mid");
  b.Output("mid", {2, 2, 4});
  b.Ints("last", {1}, {-1});
  b.Node("Gather", {"x", "last"}, "tail")
      ->add_attribute()
      ->CopyFrom(IntAttr("axis", -2));
  b.Output("tail", {2, 1, 4});
  b.Ints("one", {}, {1});
  b.Node("Gather", {"x", "one"}, "image1");  // axis 0: a whole image
  b.Output("image1", {5, 4});
  fb::ModuleT module;
  const Status s = Import(b.model(), &module);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(Kinds(module),
            (std::vector<fb::OpKind>{fb::OpKind::CopyRows, fb::OpKind::CopyRows,
                                     fb::OpKind::CopyRows}));
  EXPECT_EQ(Segments(*module.ops[0]),
            (std::vector<std::string>{"0:3+2@0", "0:8+2@2"}));
  EXPECT_EQ(Segments(*module.ops[1]),
            (std::vector<std::string>{"0:4+1@0", "0:9+1@1"}));
  EXPECT_EQ(Segments(*module.ops[2]), (std::vector<std::string>{"0:5+5@0"}));
  for (const auto& op : module.ops) {
    EXPECT_EQ(ir::CheckOpShapes(*op, module).message(), "");
  }
}

// A Slice that keeps every element (x[0:, :] as exporters write it) moves
// nothing.
TEST(ImportOnnx, FullSliceIsAView) {
  ModelBuilder b;
  b.Input("x", {2, 3, 4});
  b.Ints("starts", {1}, {0});
  b.Ints("ends", {1}, {std::numeric_limits<int64_t>::max()});
  b.Ints("axes", {1}, {0});
  b.Node("Slice", {"x", "starts", "ends", "axes"}, "all");
  b.Constant("w", {4, 3}, std::vector<float>(12, 0.5f));
  b.Node("MatMul", {"all", "w"}, "y");
  b.Output("y", {2, 3, 3});
  fb::ModuleT module;
  const Status s = Import(b.model(), &module);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(Kinds(module), (std::vector<fb::OpKind>{fb::OpKind::MatMul}));
}

// CLIP's embeddings at batch 2: a [D] class embedding expanded to
// [2, 1, D], and the position table gathered at positions 0..T-1 (every
// row in order: no copy), added per image. D is wide enough that the
// Gather is not folded into a constant (kMaxFoldedElements), as with a
// real CLIP's table.
TEST(ImportOnnx, ClipClassEmbeddingAndGatheredPositions) {
  constexpr int64_t kD = 32768;
  ModelBuilder b;
  b.Input("patches", {2, 2, kD});
  b.Constant("class_embedding", {kD}, std::vector<float>(kD, 0.5f));
  b.Ints("batch_shape", {3}, {2, 1, kD});
  b.Node("Expand", {"class_embedding", "batch_shape"}, "cls");
  b.Node("Concat", {"cls", "patches"}, "tokens")
      ->add_attribute()
      ->CopyFrom(IntAttr("axis", 1));
  std::vector<float> table(3 * kD);
  for (size_t i = 0; i < table.size(); ++i) table[i] = 1e-4f * i;
  b.Constant("position_embedding", {3, kD}, table);
  b.Ints("position_ids", {1, 3}, {0, 1, 2});
  b.Node("Gather", {"position_embedding", "position_ids"}, "positions");
  b.Node("Add", {"tokens", "positions"}, "y");
  b.Output("y", {2, 3, kD});
  fb::ModuleT module;
  const Status s = Import(b.model(), &module);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(Kinds(module),
            (std::vector<fb::OpKind>{fb::OpKind::CopyRows, fb::OpKind::CopyRows,
                                     fb::OpKind::Add}));
  EXPECT_EQ(
      Segments(*module.ops[0]),
      (std::vector<std::string>{"0:0+1@0", "1:0+2@1", "0:0+1@3", "1:2+2@4"}));
  // The table itself, once per image.
  EXPECT_EQ(Segments(*module.ops[1]),
            (std::vector<std::string>{"0:0+3@0", "0:0+3@3"}));
  EXPECT_EQ(module.values[module.ops[1]->operands[0]]->name,
            "position_embedding");
  for (const auto& op : module.ops) {
    EXPECT_EQ(ir::CheckOpShapes(*op, module).message(), "");
  }
}

// Row movements tilec cannot express (across the width, at computed
// positions, strided, in two axes at once): each is Infeasible naming the
// node and why.
TEST(ImportOnnx, RowMovementsOffTheTokenAxisAreRefused) {
  struct Case {
    const char* what;
    std::function<void(ModelBuilder&)> build;  // writes "y" from "x"
    std::vector<int64_t> y;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"concat of widths",
       [](ModelBuilder& b) {
         b.Node("Concat", {"x", "x"}, "y")
             ->add_attribute()
             ->CopyFrom(IntAttr("axis", 2));
       },
       {2, 3, 8},
       "node 'y_node' (Concat, opset 17): a Concat on axis 2 of a rank-3 "
       "tensor, the last (width) axis; tilec moves whole rows only"},
      {"computed index",
       [](ModelBuilder& b) {
         b.Input("i", {}, TensorProto::INT64);
         b.Node("Gather", {"x", "i"}, "y")
             ->add_attribute()
             ->CopyFrom(IntAttr("axis", 1));
       },
       {2, 4},
       "node 'y_node' (Gather, opset 17): a Gather with a computed index"},
      {"gather of a width",
       [](ModelBuilder& b) {
         b.Ints("zero", {}, {0});
         b.Node("Gather", {"x", "zero"}, "y")
             ->add_attribute()
             ->CopyFrom(IntAttr("axis", 2));
       },
       {2, 3},
       "a Gather on axis 2 of a rank-3 tensor, the last (width) axis"},
      {"strided slice",
       [](ModelBuilder& b) {
         b.Ints("starts", {1}, {0});
         b.Ints("ends", {1}, {3});
         b.Ints("axes", {1}, {1});
         b.Ints("steps", {1}, {2});
         b.Node("Slice", {"x", "starts", "ends", "axes", "steps"}, "y");
       },
       {2, 2, 4},
       "a Slice with step 2; tilec picks contiguous rows"},
      {"slice of widths",
       [](ModelBuilder& b) {
         b.Ints("starts", {1}, {0});
         b.Ints("ends", {1}, {2});
         b.Ints("axes", {1}, {-1});
         b.Node("Slice", {"x", "starts", "ends", "axes"}, "y");
       },
       {2, 3, 2},
       "a Slice on axis 2 of a rank-3 tensor, the last (width) axis"},
      {"slice of two axes",
       [](ModelBuilder& b) {
         b.Ints("starts", {2}, {0, 1});
         b.Ints("ends", {2}, {1, 3});
         b.Ints("axes", {2}, {0, 1});
         b.Node("Slice", {"x", "starts", "ends", "axes"}, "y");
       },
       {1, 2, 4},
       "a Slice of more than one axis; tilec picks rows along one axis"},
      {"expand of a width",
       [](ModelBuilder& b) {
         b.Input("col", {2, 3, 1});
         b.Ints("shape", {3}, {2, 3, 4});
         b.Node("Expand", {"col", "shape"}, "wide");
         b.Node("Add", {"x", "wide"}, "y");
       },
       {2, 3, 4},
       "node 'wide_node' (Expand, opset 17): an Expand that broadcasts "
       "other than over leading (image) axes"},
      {"add broadcast over tokens",
       [](ModelBuilder& b) {
         b.Input("per_image", {2, 1, 4});
         b.Node("Add", {"x", "per_image"}, "y");
       },
       {2, 3, 4},
       "node 'y_node' (Add, opset 17): it broadcasts [2,1,4] to [2,3,4]"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ModelBuilder b;
    b.Input("x", {2, 3, 4});
    c.build(b);
    b.Output("y", c.y);
    fb::ModuleT module;
    const Status s = Import(b.model(), &module);
    EXPECT_EQ(s.code(), StatusCode::kInfeasible);
    EXPECT_THAT(s.message(), HasSubstr("m.onnx: "));
    EXPECT_THAT(s.message(), HasSubstr(c.message));
    EXPECT_EQ(s.message().find('\n'), std::string::npos);
  }
}

// The one step of a general elementwise op (import_elementwise.h).
const fb::FusedStepT& OnlyStep(const fb::OperationT& op) {
  EXPECT_EQ(op.kind, fb::OpKind::Fused);
  EXPECT_EQ(op.body.size(), 1u);
  return *op.body.at(0);
}

TEST(ImportOnnx, LoneUnaryOpsAreFusedUnarySteps) {
  const std::pair<const char*, fb::ElementwiseFn> ops[] = {
      {"Sigmoid", fb::ElementwiseFn::Sigmoid},
      {"Erf", fb::ElementwiseFn::Erf},
      {"Tanh", fb::ElementwiseFn::Tanh},
      {"Sqrt", fb::ElementwiseFn::Sqrt},
      {"Relu", fb::ElementwiseFn::Relu}};
  for (const auto& [op_type, fn] : ops) {
    ModelBuilder b;
    b.Input("x", {2, 3, 4});
    b.Node(op_type, {"x"}, "y");
    b.Output("y", {2, 3, 4});
    fb::ModuleT module;
    const Status s = Import(b.model(), &module);
    ASSERT_TRUE(s.ok()) << op_type << ": " << s.message();
    ASSERT_EQ(module.ops.size(), 1u);
    const fb::FusedStepT& step = OnlyStep(*module.ops[0]);
    EXPECT_EQ(step.kind, fb::FusedStepKind::Unary) << op_type;
    EXPECT_EQ(step.fn, fn) << op_type;
    EXPECT_EQ(step.operand, -1);
    EXPECT_EQ(module.values[module.ops[0]->results[0]]->shape,
              (std::vector<int64_t>{6, 4}));
  }
}

// LayerScale (DINOv2, EVA): the block's output times a learned per-channel
// [D] vector, then the residual.
TEST(ImportOnnx, LayerScaleMulIsARowBroadcastBinaryStep) {
  ModelBuilder b;
  b.Input("x", {1, 5, 4});
  b.Input("h", {1, 5, 4});
  b.Constant("gamma", {4}, {0.1f, 0.2f, 0.3f, 0.4f});
  b.Node("Mul", {"gamma", "h"}, "scaled");
  b.Node("Add", {"x", "scaled"}, "y");
  b.Output("y", {1, 5, 4});
  fb::ModuleT module;
  std::string sidecar;
  const Status s = Import(b.model(), &module, &sidecar);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(Kinds(module),
            (std::vector<fb::OpKind>{fb::OpKind::Fused, fb::OpKind::Add}));
  const fb::OperationT& mul = *module.ops[0];
  const fb::FusedStepT& step = OnlyStep(mul);
  EXPECT_EQ(step.kind, fb::FusedStepKind::Binary);
  EXPECT_EQ(step.fn, fb::ElementwiseFn::Mul);
  EXPECT_EQ(step.broadcast, fb::Broadcast::Row);
  EXPECT_FALSE(step.operand_first);  // Mul commutes
  ASSERT_EQ(mul.operands.size(), 2u);
  EXPECT_EQ(module.values[mul.operands[0]]->name, "h");
  const fb::ValueT& gamma = *module.values[mul.operands[1]];
  EXPECT_EQ(gamma.role, fb::ValueRole::Weight);
  EXPECT_EQ(gamma.shape, (std::vector<int64_t>{4}));
}

// One value per row, from a graph input ([B, T, 1] against [B, T, D]) or
// a constant ([T, 1], operand on the left): a Column broadcast Binary step
// whose operand is the [rows, 1] column.
TEST(ImportOnnx, ColumnBroadcastIsAColumnBinaryStep) {
  ModelBuilder b;
  b.Input("x", {2, 3, 4});
  b.Input("s", {2, 3, 1});
  b.Input("u", {3, 4});
  b.Constant("c", {3, 1}, {1.0f, 2.0f, 4.0f});
  b.Node("Mul", {"x", "s"}, "y");
  b.Node("Div", {"c", "u"}, "z");
  b.Output("y", {2, 3, 4});
  b.Output("z", {3, 4});
  fb::ModuleT module;
  const Status s = Import(b.model(), &module);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(module.ops.size(), 2u);
  const fb::FusedStepT& mul = OnlyStep(*module.ops[0]);
  EXPECT_EQ(mul.kind, fb::FusedStepKind::Binary);
  EXPECT_EQ(mul.fn, fb::ElementwiseFn::Mul);
  EXPECT_EQ(mul.broadcast, fb::Broadcast::Column);
  EXPECT_FALSE(mul.operand_first);
  const fb::ValueT& col = *module.values[module.ops[0]->operands[1]];
  EXPECT_EQ(col.name, "s");
  EXPECT_EQ(col.role, fb::ValueRole::Input);
  EXPECT_EQ(col.shape, (std::vector<int64_t>{6, 1}));
  EXPECT_EQ(module.values[module.ops[0]->results[0]]->shape,
            (std::vector<int64_t>{6, 4}));
  const fb::FusedStepT& div = OnlyStep(*module.ops[1]);
  EXPECT_EQ(div.fn, fb::ElementwiseFn::Div);
  EXPECT_EQ(div.broadcast, fb::Broadcast::Column);
  EXPECT_TRUE(div.operand_first);  // c / u
  const fb::ValueT& c = *module.values[module.ops[1]->operands[1]];
  EXPECT_EQ(c.role, fb::ValueRole::Weight);
  EXPECT_EQ(c.shape, (std::vector<int64_t>{3, 1}));
}

// A column computed on the device (a gate's sigmoid) is read as well: the
// planner redistributes it into the per-row slot.
TEST(ImportOnnx, AComputedColumnIsAColumnBinaryStep) {
  ModelBuilder b;
  b.Input("x", {3, 4});
  b.Input("g", {3, 1});
  b.Node("Sigmoid", {"g"}, "s");
  b.Node("Sub", {"s", "x"}, "y");
  b.Output("y", {3, 4});
  fb::ModuleT module;
  const Status s = Import(b.model(), &module);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(module.ops.size(), 2u);
  EXPECT_EQ(OnlyStep(*module.ops[0]).fn, fb::ElementwiseFn::Sigmoid);
  EXPECT_EQ(module.values[module.ops[0]->results[0]]->shape,
            (std::vector<int64_t>{3, 1}));
  const fb::FusedStepT& sub = OnlyStep(*module.ops[1]);
  EXPECT_EQ(sub.broadcast, fb::Broadcast::Column);
  EXPECT_TRUE(sub.operand_first);  // s - x
  EXPECT_EQ(module.ops[1]->operands[1], module.ops[0]->results[0]);
}

// A [T, 1] column against [B, T, D] repeats over the batch: not one value
// per row of the [B*T, D] view, so it is refused naming the shapes.
TEST(ImportOnnx, AColumnRepeatedOverTheBatchIsRefused) {
  ModelBuilder b;
  b.Input("x", {2, 3, 4});
  b.Input("s", {3, 1});
  b.Node("Mul", {"x", "s"}, "y");
  b.Output("y", {2, 3, 4});
  fb::ModuleT module;
  const Status s = Import(b.model(), &module);
  EXPECT_EQ(s.code(), StatusCode::kInfeasible);
  EXPECT_THAT(s.message(), HasSubstr("it broadcasts [3,1] to [2,3,4]"));
}

TEST(ImportOnnx, SubDivPowKeepTheirOperandOrder) {
  // 1 - x: a constant scalar on the left, held as a row of ones.
  ModelBuilder b;
  b.Input("x", {3, 4});
  b.Input("y", {3, 4});
  b.Scalar("one", 1.0f);
  b.Node("Sub", {"one", "x"}, "a");
  b.Node("Div", {"a", "y"}, "q");   // same shapes
  b.Node("Pow", {"q", "x"}, "p");
  b.Output("p", {3, 4});
  fb::ModuleT module;
  const Status s = Import(b.model(), &module);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(module.ops.size(), 3u);
  const fb::FusedStepT& sub = OnlyStep(*module.ops[0]);
  EXPECT_EQ(sub.fn, fb::ElementwiseFn::Sub);
  EXPECT_EQ(sub.broadcast, fb::Broadcast::Row);
  EXPECT_TRUE(sub.operand_first);
  const fb::ValueT& one = *module.values[module.ops[0]->operands[1]];
  ASSERT_TRUE(one.init != nullptr);
  EXPECT_EQ(one.init->distribution, fb::Distribution::Constant);
  EXPECT_EQ(one.init->mean, 1.0f);
  EXPECT_EQ(one.shape, (std::vector<int64_t>{4}));
  const fb::FusedStepT& div = OnlyStep(*module.ops[1]);
  EXPECT_EQ(div.fn, fb::ElementwiseFn::Div);
  EXPECT_EQ(div.broadcast, fb::Broadcast::Full);
  EXPECT_FALSE(div.operand_first);
  EXPECT_EQ(OnlyStep(*module.ops[2]).fn, fb::ElementwiseFn::Pow);
}

TEST(ImportOnnx, QuickGeluStaysGeluAndADivByAConstantIsAScale) {
  ModelBuilder b;
  b.Input("x", {2, 8});
  b.Scalar("k", 1.702f);
  b.Scalar("c", 4.0f);
  b.Node("Mul", {"x", "k"}, "kx");
  b.Node("Sigmoid", {"kx"}, "s");
  b.Node("Mul", {"x", "s"}, "g");
  b.Node("Div", {"g", "c"}, "y");
  b.Output("y", {2, 8});
  fb::ModuleT module;
  const Status s = Import(b.model(), &module);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(Kinds(module),
            (std::vector<fb::OpKind>{fb::OpKind::Gelu, fb::OpKind::Fused}));
  EXPECT_EQ(module.ops[0]->gelu, fb::GeluForm::Quick);
  const fb::FusedStepT& scale = OnlyStep(*module.ops[1]);
  EXPECT_EQ(scale.kind, fb::FusedStepKind::Scale);
  EXPECT_EQ(scale.scale, 0.25f);
}

TEST(ImportOnnx, BroadcastsTilecDoesNotHoldAreRefusedNamingTheShapes) {
  struct Case {
    std::vector<int64_t> y_shape;
    bool y_computed;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{1}, false, "a scalar that is not a constant broadcast over [3,4]"},
      {{4}, true, "a computed row [4] broadcast down the rows"},
      {{2, 3, 4}, false, "it broadcasts [3,4] to [2,3,4]"},
  };
  for (const Case& c : cases) {
    ModelBuilder b;
    b.Input("x", {3, 4});
    b.Input("y0", c.y_shape);
    std::string y = "y0";
    if (c.y_computed) {
      b.Node("Sigmoid", {"y0"}, "y1");
      y = "y1";
    }
    b.Node("Mul", {"x", y}, "z");
    std::vector<int64_t> out = c.y_shape.size() == 3
                                   ? c.y_shape
                                   : std::vector<int64_t>{3, 4};
    b.Output("z", out);
    fb::ModuleT module;
    const Status s = Import(b.model(), &module);
    EXPECT_EQ(s.code(), StatusCode::kInfeasible) << c.message;
    EXPECT_THAT(s.message(),
                HasSubstr("m.onnx: node 'z_node' (Mul, opset 17): "));
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
}

TEST(ImportOnnx, SymbolicBatchIsBoundAndRecorded) {
  ModelBuilder b;
  b.SymbolicInput("x", {1, 3, 4}, {{0, "batch"}});
  b.Constant("w", {4, 4}, std::vector<float>(16, 0.5f));
  b.Node("Shape", {"x"}, "shape");
  b.Node("MatMul", {"x", "w"}, "h");
  b.Node("Reshape", {"h", "shape"}, "y");  // folds only with the batch bound
  b.Output("y", {1, 3, 4});
  for (int64_t batch : {1, 3}) {
    fb::ModuleT module;
    const Status s = Import(b.model(), &module, nullptr, batch);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(module.model->batch, batch);
    EXPECT_EQ(module.values[module.ops[0]->operands[0]]->shape,
              (std::vector<int64_t>{batch * 3, 4}));
  }
}

TEST(ImportOnnx, SymbolicDimensionsBeyondTheBatchAreRefused) {
  ModelBuilder b;
  b.SymbolicInput("x", {1, 3, 4}, {{0, "batch"}, {1, "tokens"}});
  b.Constant("w", {4, 4}, std::vector<float>(16, 0.5f));
  b.Node("MatMul", {"x", "w"}, "y");
  b.Output("y", {1, 3, 4});
  fb::ModuleT module;
  Status s = Import(b.model(), &module);
  EXPECT_EQ(s.code(), StatusCode::kInfeasible);
  EXPECT_EQ(s.message(),
            "m.onnx: input 'x' dimension 1 is symbolic ('tokens'); only the "
            "first (batch) dimension may be, bound by --batch");

  ModelBuilder fixed;
  fixed.Input("x", {2, 4});
  fixed.Constant("w", {4, 4}, std::vector<float>(16, 0.5f));
  fixed.Node("MatMul", {"x", "w"}, "y");
  fixed.Output("y", {2, 4});
  s = Import(fixed.model(), &module, nullptr, 2);
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
  EXPECT_THAT(s.message(), HasSubstr("--batch=2, but no graph input"));
}

// x.mean(dim=1) of [B, T, w]: a MatMul with a [B, B*T] matrix of 1/T on
// each image's own tokens, whatever keepdims says.
TEST(ImportOnnx, TokenMeanIsAnAveragingMatMul) {
  for (int64_t keep : {0, 1}) {
    ModelBuilder b;
    b.Input("x", {2, 3, 4});
    b.Node("ReduceMean", {"x"}, "y")->add_attribute()->set_name("axes");
    auto* n = b.model().mutable_graph()->mutable_node(0);
    n->mutable_attribute(0)->set_type(::onnx::AttributeProto::INTS);
    n->mutable_attribute(0)->add_ints(1);
    auto* k = n->add_attribute();
    k->set_name("keepdims");
    k->set_type(::onnx::AttributeProto::INT);
    k->set_i(keep);
    b.Output("y", keep ? std::vector<int64_t>{2, 1, 4}
                       : std::vector<int64_t>{2, 4});
    fb::ModuleT module;
    std::string sidecar;
    const Status s = Import(b.model(), &module, &sidecar);
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_EQ(Kinds(module), std::vector<fb::OpKind>{fb::OpKind::MatMul});
    const fb::ValueT& average = *module.values[module.ops[0]->operands[0]];
    EXPECT_EQ(average.role, fb::ValueRole::Weight);
    EXPECT_EQ(average.shape, (std::vector<int64_t>{2, 6}));
    const float third = 1.0f / 3;
    EXPECT_EQ(SidecarFloats(average, sidecar),
              (std::vector<float>{third, third, third, 0, 0, 0,  //
                                  0, 0, 0, third, third, third}));
    EXPECT_EQ(module.values[module.ops[0]->results[0]]->shape,
              (std::vector<int64_t>{2, 4}));
  }
}

TEST(ImportOnnx, MeanOverTheWidthIsRefused) {
  ModelBuilder b;
  b.Input("x", {2, 3, 4});
  b.Node("ReduceMean", {"x"}, "y")->add_attribute()->set_name("axes");
  auto* a = b.model().mutable_graph()->mutable_node(0)->mutable_attribute(0);
  a->set_type(::onnx::AttributeProto::INTS);
  a->add_ints(2);
  b.Output("y", {2, 3, 1});
  fb::ModuleT module;
  const Status s = Import(b.model(), &module);
  EXPECT_EQ(s.code(), StatusCode::kInfeasible);
  EXPECT_THAT(s.message(), HasSubstr("node 'y_node' (ReduceMean, opset 17): "
                                     "a ReduceMean over axes other than the "
                                     "tokens"));
}

// nn.MultiheadAttention(batch_first=True) over a probe repeated per image,
// as torch.onnx.export writes it (k and v by one MatMul, then sliced):
// import-model's MAP head ops. `mask` adds a constant to the scores.
::onnx::ModelProto PoolingAttention(bool mask) {
  constexpr int64_t kB = 2, kT = 3, kW = 4, kH = 2, kD = 2;
  ModelBuilder b;
  b.Input("x", {kB, kT, kW});
  b.Constant("probe", {1, 1, kW}, {0.1f, 0.2f, 0.3f, 0.4f});
  b.Ints("repeats", {3}, {kB, 1, 1});
  b.Node("Tile", {"probe", "repeats"}, "probes");
  b.Node("Transpose", {"probes"}, "q_in")->add_attribute();
  std::vector<float> wq(kW * kW), wkv(kW * 2 * kW), bq(kW), bkv(2 * kW);
  for (size_t i = 0; i < wq.size(); ++i) wq[i] = 0.01f * i;
  for (size_t i = 0; i < wkv.size(); ++i) wkv[i] = -0.02f * i;
  for (size_t i = 0; i < bq.size(); ++i) bq[i] = 0.5f + i;
  for (size_t i = 0; i < bkv.size(); ++i) bkv[i] = 1.5f + i;
  b.Constant("wq", {kW, kW}, wq);
  b.Constant("bq", {kW}, bq);
  b.Constant("wkv", {kW, 2 * kW}, wkv);
  b.Constant("bkv", {2 * kW}, bkv);
  b.Node("MatMul", {"q_in", "wq"}, "q_mm");
  b.Node("Add", {"bq", "q_mm"}, "q");
  b.Node("Transpose", {"x"}, "x_seq")->add_attribute();
  b.Node("MatMul", {"x_seq", "wkv"}, "kv_mm");
  b.Node("Add", {"bkv", "kv_mm"}, "kv");
  b.Ints("zero", {1}, {0});
  b.Ints("w", {1}, {kW});
  b.Ints("w2", {1}, {2 * kW});
  b.Ints("last", {1}, {2});
  b.Node("Slice", {"kv", "zero", "w", "last"}, "k");
  b.Node("Slice", {"kv", "w", "w2", "last"}, "v");
  b.Ints("q_heads", {3}, {1, kB * kH, kD});
  b.Ints("kv_heads", {3}, {kT, kB * kH, kD});
  b.Node("Reshape", {"q", "q_heads"}, "qh");
  b.Node("Reshape", {"k", "kv_heads"}, "kh");
  b.Node("Reshape", {"v", "kv_heads"}, "vh");
  b.Node("Transpose", {"qh"}, "qt")->add_attribute();
  b.Node("Transpose", {"kh"}, "kt")->add_attribute();
  b.Node("Transpose", {"vh"}, "vt")->add_attribute();
  b.Scalar("sqrt_d", std::sqrt(static_cast<float>(kD)));
  b.Node("Div", {"qt", "sqrt_d"}, "qs");
  b.Node("MatMul", {"qs", "kt"}, "scores");
  std::string scores = "scores";
  if (mask) {
    b.Constant("mask", {1, kT}, {0.0f, 0.0f, -1e4f});
    b.Node("Add", {"scores", "mask"}, "masked");
    scores = "masked";
  }
  b.Node("Softmax", {scores}, "probs");
  b.Node("MatMul", {"probs", "vt"}, "ctx");
  b.Node("Transpose", {"ctx"}, "ctx_seq")->add_attribute();
  b.Ints("rows", {2}, {kB, kW});
  b.Node("Reshape", {"ctx_seq", "rows"}, "y");
  b.Output("y", {kB, kW});
  // Every Transpose above is perm [1, 0, 2] but the keys' [1, 2, 0].
  for (auto& n : *b.model().mutable_graph()->mutable_node()) {
    if (n.op_type() != "Transpose") continue;
    auto* perm = n.mutable_attribute(0);
    perm->set_name("perm");
    perm->set_type(::onnx::AttributeProto::INTS);
    const bool keys = n.output(0) == "kt";
    for (int64_t p : keys ? std::vector<int64_t>{1, 2, 0}
                          : std::vector<int64_t>{1, 0, 2}) {
      perm->add_ints(p);
    }
  }
  return b.model();
}

TEST(ImportOnnx, PoolingAttentionIsTheMapHeadsCrossAttention) {
  fb::ModuleT module;
  std::string sidecar;
  const Status s = Import(PoolingAttention(false), &module, &sidecar);
  ASSERT_TRUE(s.ok()) << s.message();
  using K = fb::OpKind;
  ASSERT_EQ(Kinds(module),
            (std::vector<K>{K::MatMul, K::BiasAdd, K::CopyRows, K::MatMul,
                            K::BiasAdd, K::AttentionScores, K::Softmax,
                            K::AttentionContext}));
  for (const auto& op : module.ops) {
    EXPECT_EQ(ir::CheckOpShapes(*op, module).message(), "");
  }
  // The probe row's query, then one copy per image.
  EXPECT_EQ(module.values[module.ops[0]->operands[0]]->shape,
            (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(module.values[module.ops[2]->results[0]]->shape,
            (std::vector<int64_t>{2, 4}));
  // k and v of the image-major tokens [B*T, w], columns [k | v].
  EXPECT_EQ(module.values[module.ops[3]->operands[0]]->role,
            fb::ValueRole::Input);
  EXPECT_EQ(module.values[module.ops[3]->operands[0]]->shape,
            (std::vector<int64_t>{6, 4}));
  std::vector<float> wkv(32);
  for (size_t i = 0; i < wkv.size(); ++i) wkv[i] = -0.02f * i;
  EXPECT_EQ(SidecarFloats(*module.values[module.ops[3]->operands[1]], sidecar),
            wkv);
  const fb::OperationT& scores = *module.ops[5];
  EXPECT_EQ(scores.operands.size(), 2u);  // the cross form: q, kv
  EXPECT_EQ(scores.heads, 2);
  EXPECT_EQ(scores.head_dim, 2);
  EXPECT_FLOAT_EQ(scores.scale, 1.0f / std::sqrt(2.0f));
  EXPECT_EQ(module.values[module.ops[7]->results[0]]->shape,
            (std::vector<int64_t>{2, 4}));
}

TEST(ImportOnnx, PoolingAttentionWithAMaskIsRefused) {
  fb::ModuleT module;
  const Status s = Import(PoolingAttention(true), &module);
  EXPECT_EQ(s.code(), StatusCode::kInfeasible);
  EXPECT_THAT(s.message(),
              HasSubstr("node 'ctx_node' (MatMul, opset 17): attention "
                        "pooling (one query): expected the scores 'masked' "
                        "to be q k^T scaled by constants"));
}

// A weight cut from a constant beyond the folding limit (the MAP head's
// in_proj_weight at so400m's width, sliced by bounds computed from a
// dynamic batch) is still a constant weight.
TEST(ImportOnnx, LargeSlicedWeightIsAConstant) {
  constexpr int64_t kN = kMaxFoldedElements / 4 + 8;
  ModelBuilder b;
  b.Input("x", {2, 4});
  b.Constant("w", {4, kN}, std::vector<float>(4 * kN, 0.25f));
  b.Ints("start", {1}, {1});
  b.Ints("end", {1}, {kN});
  b.Ints("axis", {1}, {1});
  b.Node("Slice", {"w", "start", "end", "axis"}, "w_cut");
  b.Node("MatMul", {"x", "w_cut"}, "y");
  b.Output("y", {2, kN - 1});
  fb::ModuleT module;
  const Status s = Import(b.model(), &module);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(Kinds(module), std::vector<fb::OpKind>{fb::OpKind::MatMul});
  const fb::ValueT& w = *module.values[module.ops[0]->operands[1]];
  EXPECT_EQ(w.role, fb::ValueRole::Weight);
  EXPECT_EQ(w.shape, (std::vector<int64_t>{4, kN - 1}));
}

// Such folds add up to no more elements than the initializers hold: a
// weight transposed twice is one weight's worth, and the second is left
// as a computed (here refused) Transpose.
TEST(ImportOnnx, LargeFoldsAreBoundedByTheInitializers) {
  constexpr int64_t kN = kMaxFoldedElements / 4 + 8;
  ModelBuilder b;
  b.Input("x", {2, 4});
  b.Constant("w", {4, kN}, std::vector<float>(4 * kN, 0.25f));
  b.Node("Transpose", {"w"}, "wt");
  b.Node("Transpose", {"wt"}, "wtt");
  b.Node("MatMul", {"x", "wtt"}, "y");
  b.Output("y", {2, kN});
  fb::ModuleT module;
  const Status s = Import(b.model(), &module);
  EXPECT_EQ(s.code(), StatusCode::kInfeasible);
  EXPECT_THAT(s.message(), HasSubstr("node 'wtt_node' (Transpose, opset 17)"));
}

TEST(ImportOnnx, UnsupportedNodeIsInfeasibleNamingIt) {
  ModelBuilder b;
  b.Input("x", {2, 2});
  b.Node("Sin", {"x"}, "y");
  b.Output("y", {2, 2});
  fb::ModuleT module;
  const Status s = Import(b.model(), &module);
  EXPECT_EQ(s.code(), StatusCode::kInfeasible);
  EXPECT_THAT(s.message(), HasSubstr("m.onnx: node 'y_node' (Sin, opset 17)"));
}

TEST(ImportOnnx, OpsetOutsideTheRangeIsInfeasible) {
  ModelBuilder b;
  b.model().mutable_opset_import(0)->set_version(11);
  b.Input("x", {2, 2});
  b.Output("x", {2, 2});
  fb::ModuleT module;
  const Status s = Import(b.model(), &module);
  EXPECT_EQ(s.code(), StatusCode::kInfeasible);
  EXPECT_THAT(s.message(), HasSubstr("opset 11"));
}

TEST(ImportOnnx, UndefinedTensorIsBadInput) {
  ModelBuilder b;
  b.Input("x", {2, 2});
  b.Node("Add", {"x", "nowhere"}, "y");
  b.Output("y", {2, 2});
  fb::ModuleT module;
  const Status s = Import(b.model(), &module);
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
  EXPECT_THAT(s.message(), HasSubstr("reads 'nowhere'"));
}

// Issue 28: a model that breaks an operator's rules is bad input (exit 2)
// naming the node; a valid one tilec cannot hold is infeasible (exit 3).
// A view declared with another number of elements than its input (the
// onnx fuzz target's mutation of ONNX's test_unsqueeze_axis_0) was an
// internal error.
TEST(ImportOnnx, AViewDeclaredWithOtherElementsIsBadInput) {
  ModelBuilder b;
  b.Input("x", {3, 4, 5});
  b.Input("axes", {1}, TensorProto::INT64);
  b.Node("Unsqueeze", {"x", "axes"}, "y");
  b.Output("y", {3, 3, 4, 5});
  fb::ModuleT module;
  const Status s = Import(b.model(), &module);
  EXPECT_EQ(s.code(), StatusCode::kBadInput) << s.message();
  EXPECT_THAT(s.message(), HasSubstr("Unsqueeze"));
  EXPECT_THAT(s.message(), HasSubstr("'x' is [3,4,5]"));
}

TEST(ImportOnnx, InvalidModelsAreBadInputNamingTheNode) {
  struct Case {
    std::function<void(ModelBuilder*)> build;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](ModelBuilder* b) {
         b->Input("x", {2, 4});
         b->Constant("w", {5, 3}, std::vector<float>(15, 0.5f));
         b->Node("MatMul", {"x", "w"}, "y");
         b->Output("y", {2, 3});
       },
       "node 'y_node' (MatMul, opset 17): inner dimensions differ"},
      {[](ModelBuilder* b) {
         b->Input("x", {3, 4});
         b->Ints("i", {}, {1});
         auto* g = b->Node("Gather", {"x", "i"}, "g");
         auto* a = g->add_attribute();
         a->set_name("axis");
         a->set_type(::onnx::AttributeProto::INT);
         a->set_i(5);
         b->Node("Add", {"g", "g"}, "y");
         b->Output("y", {4});
       },
       "axis 5 is out of range for rank 2"},
      {[](ModelBuilder* b) {
         b->Input("x", {2, -4});
         b->Node("Add", {"x", "x"}, "y");
         b->Output("y", {2, 4});
       },
       "tensor 'x' is declared with a negative dimension -4"},
      {[](ModelBuilder* b) {
         b->Input("x", {2, 4});
         b->Ints("s", {}, {0});
         b->Ints("l", {}, {4});
         b->Ints("d", {}, {0});
         b->Node("Range", {"s", "l", "d"}, "r");
         b->Node("Reshape", {"x", "r"}, "y");
         b->Output("y", {2, 4});
       },
       "Range with a step (delta) of 0"},
  };
  for (const Case& c : cases) {
    ModelBuilder b;
    c.build(&b);
    fb::ModuleT module;
    const Status s = Import(b.model(), &module);
    EXPECT_EQ(s.code(), StatusCode::kBadInput) << s.message();
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
}

TEST(ImportOnnx, EmptyOrHugeInputsAndLongChainsAreInfeasible) {
  ModelBuilder zero;
  zero.Input("x", {0, 4});
  zero.Node("Add", {"x", "x"}, "y");
  zero.Output("y", {0, 4});
  fb::ModuleT module;
  Status s = Import(zero.model(), &module);
  EXPECT_EQ(s.code(), StatusCode::kInfeasible);
  EXPECT_THAT(s.message(), HasSubstr("graph input 'x' is [0,4]"));

  // A MatMul then 20,001 Adds: emission would recurse once per Add.
  ModelBuilder chain;
  chain.Input("x", {2, 2});
  chain.Constant("w", {2, 2}, {1, 2, 3, 4});
  chain.Constant("b", {2}, {1, 2});
  chain.Node("MatMul", {"x", "w"}, "t0");
  for (int i = 1; i <= 20001; ++i) {
    chain.Node("Add", {"t" + std::to_string(i - 1), "b"},
               "t" + std::to_string(i));
  }
  chain.Output("t20001", {2, 2});
  s = Import(chain.model(), &module);
  EXPECT_EQ(s.code(), StatusCode::kInfeasible);
  EXPECT_THAT(s.message(), HasSubstr("chain of more than 20000 ops"));
}

// The onnx fuzz target's UBSan findings, each refused cleanly.
TEST(ImportOnnx, ShapesThatOverflowOrAreUnknownAreRefused) {
  fb::ModuleT module;
  // A Gemm's C whose shape is not inferred (it was dereferenced).
  ModelBuilder gemm;
  gemm.Input("x", {2, 4});
  gemm.Constant("w", {4, 3}, std::vector<float>(12, 0.5f));
  gemm.Node("NonZero", {"x"}, "nz");
  gemm.Node("Gemm", {"x", "w", "nz"}, "y");
  gemm.Output("y", {2, 3});
  Status s = Import(gemm.model(), &module);
  EXPECT_EQ(s.code(), StatusCode::kInfeasible) << s.message();
  EXPECT_THAT(s.message(), HasSubstr("the shape of its output 'nz' is unknown"));
  // A Reshape target whose product overflows int64 (it overflowed).
  ModelBuilder reshape;
  reshape.Input("x", {2, 4});
  reshape.Ints("s", {3}, {int64_t{1} << 40, int64_t{1} << 40, 8});
  reshape.Node("Reshape", {"x", "s"}, "r");
  reshape.Node("Add", {"r", "r"}, "y");
  reshape.Output("y", {2, 4});
  s = Import(reshape.model(), &module);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.code(), StatusCode::kInternal) << s.message();
  // A declared shape whose product overflows (Product saturates).
  ModelBuilder huge;
  huge.Input("x", {int64_t{1} << 40, int64_t{1} << 40});
  huge.Node("Add", {"x", "x"}, "y");
  huge.Output("y", {int64_t{1} << 40, int64_t{1} << 40});
  s = Import(huge.model(), &module);
  EXPECT_EQ(s.code(), StatusCode::kInfeasible) << s.message();
  EXPECT_THAT(s.message(), HasSubstr("more than 2147483648 elements"));
}

TEST(ImportOnnx, MalformedBytesAreBadInput) {
  ::onnx::ModelProto model;
  const Status s = ParseOnnxModel("\x0a\xff\xff\xff", "x.onnx", &model);
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
  EXPECT_THAT(s.message(), HasSubstr("x.onnx: not a valid ONNX model"));
}

TEST(OnnxTensor, RawAndTypedDataAndHalfFloats) {
  TensorProto t;
  t.set_data_type(TensorProto::FLOAT16);
  t.add_dims(2);
  t.add_int32_data(0x3c00);  // 1.0
  t.add_int32_data(0xc000);  // -2.0
  OnnxConstant c;
  ASSERT_TRUE(DecodeOnnxTensor(t, ".", "t", &c).ok());
  EXPECT_EQ(c.data, (std::vector<double>{1.0, -2.0}));
  t.clear_int32_data();
  t.set_raw_data(std::string("\x00\x3c\x00\xc0", 4));
  ASSERT_TRUE(DecodeOnnxTensor(t, ".", "t", &c).ok());
  EXPECT_EQ(c.data, (std::vector<double>{1.0, -2.0}));
  t.set_raw_data(std::string("\x00\x3c", 2));
  const Status s = DecodeOnnxTensor(t, ".", "t", &c);
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
  EXPECT_THAT(s.message(), HasSubstr("t: holds 2 bytes, its dims need 4"));
}

TEST(OnnxTensor, ExternalDataIsReadFromItsFile) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  {
    std::ofstream out(dir + "/weights.bin", std::ios::binary);
    const float values[] = {9.0f, 1.5f, -2.0f};
    out.write(reinterpret_cast<const char*>(values), sizeof values);
  }
  TensorProto t;
  t.set_data_type(TensorProto::FLOAT);
  t.add_dims(2);
  t.set_data_location(TensorProto::EXTERNAL);
  auto entry = [&](const char* key, const char* value) {
    auto* e = t.add_external_data();
    e->set_key(key);
    e->set_value(value);
  };
  entry("location", "weights.bin");
  entry("offset", "4");
  entry("length", "8");
  OnnxConstant c;
  ASSERT_TRUE(DecodeOnnxTensor(t, dir, "w", &c).ok());
  EXPECT_EQ(c.data, (std::vector<double>{1.5, -2.0}));
  t.mutable_external_data(1)->set_value("8");  // 8 + 8 > 12 bytes
  Status s = DecodeOnnxTensor(t, dir, "w", &c);
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
  EXPECT_THAT(s.message(), HasSubstr("lies beyond the end"));
  t.mutable_external_data(1)->set_value("four");
  s = DecodeOnnxTensor(t, dir, "w", &c);
  EXPECT_THAT(s.message(), HasSubstr("offset 'four' is not a number"));
}

}  // namespace
}  // namespace tilec::passes
