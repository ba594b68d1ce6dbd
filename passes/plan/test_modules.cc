#include "passes/plan/test_modules.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "formats/ir.h"
#include "formats/test_graph.h"
#include "formats/op_shapes.h"

namespace tilec::plan {

fb::ModuleT Model(const std::string& target, const std::string& preset,
                  passes::ModelOverrides overrides, const std::string& part) {
  fb::ModuleT m;
  m.target = std::make_unique<fb::TargetT>();
  EXPECT_TRUE(ir::LoadTarget(target, m.target.get()).ok());
  const Status built = passes::BuildModel(preset, part, overrides, &m);
  EXPECT_TRUE(built.ok()) << built.message();
  return m;
}

passes::ModelOverrides TinyOverrides(int64_t tokens, int64_t heads,
                                     int64_t mlp_width) {
  passes::ModelOverrides o;
  o.tokens = tokens;
  o.width = 64;
  o.mlp_width = mlp_width;
  o.heads = heads;
  return o;
}

fb::ModuleT TinyBlocks(int layers, bool repeat, int64_t tokens,
                       int64_t mlp_width) {
  passes::ModelOverrides o = TinyOverrides(tokens, 2, mlp_width);
  o.layers = layers;
  o.repeat = repeat;
  return Model("tiny", "siglip-so400m-384", o);
}

fb::ModuleT WithOpAfterBody(fb::ModuleT m, fb::OpKind kind) {
  const uint32_t out = m.repeats[0]->carried_out;
  uint32_t next_value = 0, next_op = 0;
  for (const auto& v : m.values) next_value = std::max(next_value, v->id + 1);
  for (const auto& op : m.ops) next_op = std::max(next_op, op->id + 1);
  std::vector<int64_t> shape;
  for (auto& v : m.values) {
    if (v->id != out) continue;
    v->role = fb::ValueRole::Activation;
    shape = v->shape;
  }
  auto value = [&](const std::string& name, std::vector<int64_t> s,
                   fb::ValueRole role) {
    auto v = std::make_unique<fb::ValueT>();
    v->id = next_value++;
    v->name = name;
    v->shape = std::move(s);
    v->role = role;
    if (role == fb::ValueRole::Weight) {
      v->init = std::make_unique<fb::WeightInitT>();
      v->init->distribution = fb::Distribution::Constant;
      v->init->mean = name == "final.gamma" ? 1.0f : 0.0f;
    }
    m.values.push_back(std::move(v));
    return m.values.back()->id;
  };
  auto op = std::make_unique<fb::OperationT>();
  op->id = next_op;
  op->kind = kind;
  op->operands = {out};
  if (kind == fb::OpKind::LayerNorm) {
    op->name = "final.ln";
    op->eps = 1e-6f;
    op->operands.push_back(value("final.gamma", {shape[1]},
                                 fb::ValueRole::Weight));
    op->operands.push_back(value("final.beta", {shape[1]},
                                 fb::ValueRole::Weight));
  } else {
    op->name = "final.gelu";
  }
  op->results = {value("final.out", shape, fb::ValueRole::Output)};
  m.ops.push_back(std::move(op));
  EXPECT_TRUE(ir::VerifyModule(m).ok());
  return m;
}

namespace {

// A module on `target` with no values or ops yet.
fb::ModuleT EmptyModule(const std::string& target) {
  fb::ModuleT m;
  m.target = std::make_unique<fb::TargetT>();
  EXPECT_TRUE(ir::LoadTarget(target, m.target.get()).ok());
  return m;
}

// Inputs Gaussian(0, 1) and weights Gaussian(0, 0.1), seeded `base` + id.
uint32_t SeededValue(fb::ModuleT* m, const char* name,
                     std::vector<int64_t> shape, fb::ValueRole role,
                     uint64_t base) {
  return ir::testing::AddValue(m, name, std::move(shape), role,
                               base + m->values.size(),
                               role == fb::ValueRole::Weight ? 0.1f : 1.0f);
}

}  // namespace

fb::ModuleT PatchEmbeddingModule(const std::string& target, int64_t side,
                                 int64_t patch, int64_t width) {
  fb::ModuleT m = EmptyModule(target);
  auto value = [&](const char* name, std::vector<int64_t> shape,
                   fb::ValueRole role) {
    return SeededValue(&m, name, std::move(shape), role, 7);
  };
  const int64_t patches = (side / patch) * (side / patch);
  const int64_t depth = 3 * patch * patch;
  const uint32_t image =
      value("image", {1, 3, side, side}, fb::ValueRole::Input);
  const uint32_t cut =
      value("patches", {patches, depth}, fb::ValueRole::Activation);
  const uint32_t w = value("w", {depth, width}, fb::ValueRole::Weight);
  const uint32_t y = value("y", {patches, width}, fb::ValueRole::Output);
  ir::testing::AddOp(&m, fb::OpKind::Patchify, "patchify", {image}, cut)
      ->patch = static_cast<int>(patch);
  ir::testing::AddOp(&m, fb::OpKind::MatMul, "embed", {cut, w}, y);
  return m;
}

fb::ModuleT RowMovementModule(const std::string& target, int64_t images,
                              int64_t patches, int64_t width, int64_t n) {
  fb::ModuleT m = EmptyModule(target);
  auto value = [&](const char* name, std::vector<int64_t> shape,
                   fb::ValueRole role) {
    return SeededValue(&m, name, std::move(shape), role, 11);
  };
  auto op = [&](fb::OpKind kind, const char* name,
                std::vector<uint32_t> operands, uint32_t result) {
    return ir::testing::AddOp(&m, kind, name, std::move(operands), result);
  };
  auto segment = [](fb::OperationT* o, uint32_t operand, int64_t first,
                    int64_t count, int64_t at) {
    ir::AppendRowSegment({operand, first, count, at}, o);
  };
  const int64_t tokens = patches + 1, rows = images * tokens;
  const uint32_t patch = value("patches", {images * patches, width},
                               fb::ValueRole::Input);
  const uint32_t cls = value("embed.class", {1, width}, fb::ValueRole::Weight);
  const uint32_t pos =
      value("embed.positions", {tokens, width}, fb::ValueRole::Weight);
  const uint32_t w = value("head.w", {width, n}, fb::ValueRole::Weight);
  const uint32_t t = value("tokens", {rows, width}, fb::ValueRole::Activation);
  const uint32_t p =
      value("positions", {rows, width}, fb::ValueRole::Activation);
  const uint32_t x = value("x", {rows, width}, fb::ValueRole::Activation);
  const uint32_t h = value("h", {rows, n}, fb::ValueRole::Activation);
  const uint32_t head = value("head", {images, n}, fb::ValueRole::Output);
  fb::OperationT* prepend = op(fb::OpKind::CopyRows, "embed.class", {cls, patch}, t);
  fb::OperationT* broadcast =
      op(fb::OpKind::CopyRows, "embed.positions", {pos}, p);
  op(fb::OpKind::Add, "embed.add", {t, p}, x);
  op(fb::OpKind::MatMul, "head.mm", {x, w}, h);
  fb::OperationT* pick = op(fb::OpKind::CopyRows, "head.pick", {h}, head);
  for (int64_t b = 0; b < images; ++b) {
    segment(prepend, 0, 0, 1, b * tokens);
    segment(prepend, 1, b * patches, patches, b * tokens + 1);
    segment(broadcast, 0, 0, tokens, b * tokens);
    segment(pick, 0, b * tokens, 1, b);
  }
  const Status ok = ir::VerifyModule(m);
  EXPECT_TRUE(ok.ok()) << ok.message();
  return m;
}

namespace {

// A Fused op of one step.
std::unique_ptr<fb::OperationT> OneStepOp(uint32_t id, const std::string& name,
                                          std::vector<uint32_t> operands,
                                          uint32_t result,
                                          fb::FusedStepKind kind,
                                          fb::ElementwiseFn fn, int operand,
                                          fb::Broadcast broadcast) {
  auto op = std::make_unique<fb::OperationT>();
  op->id = id;
  op->kind = fb::OpKind::Fused;
  op->name = name;
  op->operands = std::move(operands);
  op->results = {result};
  auto step = std::make_unique<fb::FusedStepT>();
  step->kind = kind;
  step->fn = fn;
  step->operand = operand;
  step->broadcast = broadcast;
  op->body.push_back(std::move(step));
  return op;
}

// The SigLIP layer with each residual branch multiplied by a Row or Column
// operand before its residual Add.
fb::ModuleT ScaledBranchesLayer(const std::string& target, int64_t tokens,
                                int64_t heads, fb::Broadcast broadcast) {
  fb::ModuleT m = Model(target, "siglip-so400m-384",
                        TinyOverrides(tokens, heads), "layer");
  uint32_t next_op = 0;
  for (const auto& op : m.ops) next_op = std::max(next_op, op->id + 1);
  std::vector<std::unique_ptr<fb::OperationT>> ops;
  int scales = 0;
  for (auto& op : m.ops) {
    if (op->kind == fb::OpKind::Add) {
      const std::string name = "ls" + std::to_string(scales++);
      const fb::ValueT& branch = *m.values[op->operands[1]];
      const std::vector<int64_t> shape = branch.shape;
      uint32_t gamma = 0;
      if (broadcast == fb::Broadcast::Row) {
        gamma = SeededValue(&m, (name + ".gamma").c_str(), {shape[1]},
                            fb::ValueRole::Weight, 23);
      } else if (scales == 1) {
        gamma = SeededValue(&m, (name + ".gamma").c_str(), {shape[0], 1},
                            fb::ValueRole::Weight, 23);
      } else {
        const uint32_t gate_in =
            SeededValue(&m, (name + ".gate_in").c_str(), {shape[0], 1},
                        fb::ValueRole::Input, 29);
        gamma = ir::testing::AddValue(&m, name + ".gate", {shape[0], 1},
                                      fb::ValueRole::Activation);
        ops.push_back(OneStepOp(next_op++, name + ".sigmoid", {gate_in}, gamma,
                                fb::FusedStepKind::Unary,
                                fb::ElementwiseFn::Sigmoid, -1,
                                fb::Broadcast::Full));
      }
      const uint32_t scaled =
          ir::testing::AddValue(&m, name + ".out", shape,
                                fb::ValueRole::Activation);
      ops.push_back(OneStepOp(next_op++, name, {op->operands[1], gamma}, scaled,
                              fb::FusedStepKind::Binary, fb::ElementwiseFn::Mul,
                              1, broadcast));
      op->operands[1] = scaled;
    }
    ops.push_back(std::move(op));
  }
  m.ops = std::move(ops);
  EXPECT_EQ(scales, 2);
  const Status ok = ir::VerifyModule(m);
  EXPECT_TRUE(ok.ok()) << ok.message();
  return m;
}

}  // namespace

fb::ModuleT LayerScaleLayer(const std::string& target, int64_t tokens,
                            int64_t heads) {
  return ScaledBranchesLayer(target, tokens, heads, fb::Broadcast::Row);
}

fb::ModuleT RowGateLayer(const std::string& target, int64_t tokens,
                         int64_t heads) {
  return ScaledBranchesLayer(target, tokens, heads, fb::Broadcast::Column);
}

}  // namespace tilec::plan
