#include "sim/reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>

#include "formats/ir.h"
#include "formats/op_shapes.h"
#include "formats/repeat.h"
#include "sim/npy.h"
#include "kernels/numerics.h"
#include "sim/tensor_data.h"
#include "passes/import/model_builder.h"

namespace tilec::kernels {
namespace {

// ---------------------------------------------------------------- helpers

// The spacing of a binary format with `mant_bits` stored mantissa bits and
// smallest normal exponent `min_exp` at x, for values stored as
// x * 2^scale_exp.
double Ulp(double x, int mant_bits, int min_exp, int scale_exp = 0) {
  const double y = std::abs(x) * std::ldexp(1.0, scale_exp);
  const int e =
      y > 0 ? std::max(static_cast<int>(std::floor(std::log2(y))), min_exp)
            : min_exp;
  return std::ldexp(1.0, e - mant_bits - scale_exp);
}
double UlpF16(double x) { return Ulp(x, 10, -14); }

// The reference computes in F32 and rounds once; the test computes in
// double. The two can land on neighbouring grid points, never further.
void ExpectF16Near(float actual, double expected, const std::string& what) {
  EXPECT_EQ(actual, RoundToF16(actual)) << what << ": not an F16 value";
  EXPECT_LE(std::abs(actual - expected), UlpF16(expected))
      << what << ": " << actual << " vs " << expected;
}

const ReferenceTensor& Get(const ReferenceResult& r, uint32_t id) {
  const ReferenceTensor* t = r.Find(id);
  EXPECT_NE(t, nullptr) << "value " << id;
  static const ReferenceTensor kEmpty;
  return t == nullptr ? kEmpty : *t;
}

double GeluDouble(double x, fb::GeluForm form) {
  switch (form) {
    case fb::GeluForm::Tanh:
      return 0.5 * x *
             (1.0 +
              std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case fb::GeluForm::Erf:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case fb::GeluForm::Quick:
      return x / (1.0 + std::exp(-1.702 * x));
  }
  return 0;
}

// Row-wise LayerNorm in double from given statistics.
std::vector<double> LayerNormDouble(const std::vector<float>& x, int64_t rows,
                                    int64_t w, const std::vector<float>& gamma,
                                    const std::vector<float>& beta,
                                    double eps) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < w; ++c) mean += x[r * w + c];
    mean /= w;
    for (int64_t c = 0; c < w; ++c) {
      var += (x[r * w + c] - mean) * (x[r * w + c] - mean);
    }
    var /= w;
    for (int64_t c = 0; c < w; ++c) {
      y[r * w + c] =
          (x[r * w + c] - mean) / std::sqrt(var + eps) * gamma[c] + beta[c];
    }
  }
  return y;
}

std::vector<double> SoftmaxDouble(const std::vector<float>& x, int64_t rows,
                                  int64_t w, double scale) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double max = -INFINITY, sum = 0;
    for (int64_t c = 0; c < w; ++c) max = std::max(max, scale * x[r * w + c]);
    for (int64_t c = 0; c < w; ++c) {
      y[r * w + c] = std::exp(scale * x[r * w + c] - max);
      sum += y[r * w + c];
    }
    for (int64_t c = 0; c < w; ++c) y[r * w + c] /= sum;
  }
  return y;
}

// The straightforward double-precision result of one op of the imported
// graphs (F16 everywhere), from the reference's own operand values, so that
// each op is checked on its own.
std::vector<double> ExpectedDouble(const fb::OperationT& op,
                                   const ReferenceResult& r) {
  auto in = [&](size_t i) -> const std::vector<float>& {
    return Get(r, op.operands[i]).data;
  };
  const std::vector<int64_t>& shape = Get(r, op.operands[0]).shape;
  const std::vector<int64_t>& out_shape = Get(r, op.results[0]).shape;
  const int64_t w = shape.back();
  const int64_t rows = static_cast<int64_t>(in(0).size()) / w;
  std::vector<double> y;
  switch (op.kind) {
    case fb::OpKind::LayerNorm:
      return LayerNormDouble(in(0), rows, w, in(1), in(2), op.eps);
    case fb::OpKind::MatMul: {
      const int64_t k = w, n = out_shape[1];
      y.assign(rows * n, 0.0);
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0;
          for (int64_t p = 0; p < k; ++p) {
            sum += static_cast<double>(in(0)[i * k + p]) * in(1)[p * n + j];
          }
          y[i * n + j] = sum;
        }
      }
      return y;
    }
    case fb::OpKind::BiasAdd:
      for (size_t i = 0; i < in(0).size(); ++i) {
        y.push_back(static_cast<double>(in(0)[i]) + in(1)[i % w]);
      }
      return y;
    case fb::OpKind::Add:
      for (size_t i = 0; i < in(0).size(); ++i) {
        y.push_back(static_cast<double>(in(0)[i]) + in(1)[i]);
      }
      return y;
    case fb::OpKind::Gelu:
      for (float v : in(0)) y.push_back(GeluDouble(v, op.gelu));
      return y;
    case fb::OpKind::Softmax:
      return SoftmaxDouble(in(0), rows, w, op.scale);
    case fb::OpKind::AttentionScores: {
      // qkv [B*T, 3HD] -> [B, H, T, T], or q [B*Tq, HD], kv [B*Tk, 2HD] ->
      // [B, H, Tq, Tk].
      const bool cross = op.operands.size() == 2;
      const int64_t b_count = out_shape[0], h_count = op.heads,
                    tq = out_shape[2], tk = out_shape[3], d = op.head_dim;
      const std::vector<float>& q = in(0);
      const std::vector<float>& kv = in(cross ? 1 : 0);
      const int64_t q_stride = (cross ? 1 : 3) * h_count * d;
      const int64_t kv_stride = (cross ? 2 : 3) * h_count * d;
      const int64_t k0 = cross ? 0 : h_count * d;
      for (int64_t b = 0; b < b_count; ++b) {
        for (int64_t h = 0; h < h_count; ++h) {
          for (int64_t i = 0; i < tq; ++i) {
            for (int64_t j = 0; j < tk; ++j) {
              double dot = 0;
              for (int64_t e = 0; e < d; ++e) {
                dot += static_cast<double>(
                           q[(b * tq + i) * q_stride + h * d + e]) *
                       kv[(b * tk + j) * kv_stride + k0 + h * d + e];
              }
              y.push_back(dot * op.scale);
            }
          }
        }
      }
      return y;
    }
    case fb::OpKind::AttentionContext: {
      // probs [B, H, Tq, Tk], qkv [B*T, 3HD] or kv [B*Tk, 2HD] -> [B*Tq, HD]
      const int64_t b_count = shape[0], h_count = op.heads, tq = shape[2],
                    tk = shape[3], d = op.head_dim;
      const std::vector<float>& p = in(0);
      const std::vector<float>& kv = in(1);
      const int64_t stride = Get(r, op.operands[1]).shape[1];
      const int64_t v0 = stride - h_count * d;  // v is the last H*D columns
      y.assign(b_count * tq * h_count * d, 0.0);
      for (int64_t b = 0; b < b_count; ++b) {
        for (int64_t h = 0; h < h_count; ++h) {
          for (int64_t i = 0; i < tq; ++i) {
            for (int64_t e = 0; e < d; ++e) {
              double sum = 0;
              for (int64_t j = 0; j < tk; ++j) {
                sum += static_cast<double>(
                           p[((b * h_count + h) * tq + i) * tk + j]) *
                       kv[(b * tk + j) * stride + v0 + h * d + e];
              }
              y[(b * tq + i) * h_count * d + h * d + e] = sum;
            }
          }
        }
      }
      return y;
    }
    default:
      ADD_FAILURE() << "no double-precision model for op " << op.id;
      return y;
  }
}

fb::ModuleT Import(std::string_view preset, std::string_view part,
                   const passes::ModelOverrides& overrides) {
  fb::ModuleT module;
  const Status built = passes::BuildModel(preset, part, overrides, &module);
  EXPECT_TRUE(built.ok()) << built.message();
  return module;
}

// A model of `tokens` tokens, `width` wide, an MLP `mlp_width` wide and
// `heads` attention heads.
passes::ModelOverrides Sized(int64_t tokens, int64_t width, int64_t mlp_width,
                             int64_t heads) {
  passes::ModelOverrides o;
  o.tokens = tokens;
  o.width = width;
  o.mlp_width = mlp_width;
  o.heads = heads;
  return o;
}

passes::ModelOverrides Tiny(int64_t batch) {
  passes::ModelOverrides o = Sized(5, 16, 24, 2);
  o.batch = batch;
  return o;
}

ReferenceResult RunOk(const fb::ModuleT& module,
                      const ReferenceOptions& options = {}) {
  ReferenceResult result;
  const Status status = RunReference(module, options, &result);
  EXPECT_TRUE(status.ok()) << status.message();
  return result;
}

// One op's result against its double-precision model.
void CheckOp(const fb::OperationT& op, const ReferenceResult& result) {
  const std::vector<double> expected = ExpectedDouble(op, result);
  const ReferenceTensor& out = Get(result, op.results[0]);
  ASSERT_EQ(out.data.size(), expected.size()) << op.name;
  for (size_t i = 0; i < expected.size(); ++i) {
    ExpectF16Near(out.data[i], expected[i],
                  op.name + "[" + std::to_string(i) + "]");
  }
}

void CheckEveryOp(const fb::ModuleT& module, const ReferenceResult& result) {
  for (const auto& op : module.ops) CheckOp(*op, result);
}

// ---------------------------------------------------------------- imported

// Every op kind of a transformer layer (LayerNorm, MatMul, BiasAdd,
// AttentionScores, Softmax, AttentionContext, Add, Gelu erf), batch 2.
TEST(ReferenceTest, VitLayerMatchesDoublePrecision) {
  const fb::ModuleT module = Import("vit-b16-224", "layer", Tiny(2));
  const ReferenceResult result = RunOk(module);
  ASSERT_EQ(result.values().size(), module.values.size());
  CheckEveryOp(module, result);
}

// The tanh GELU of SigLIP's MLP block.
TEST(ReferenceTest, SiglipMlpBlockMatchesDoublePrecision) {
  const fb::ModuleT module = Import("siglip-so400m-384", "mlp-block", Tiny(1));
  CheckEveryOp(module, RunOk(module));
}

// Probabilities are rows that sum to one, and the attention of a single
// token to itself is certain.
TEST(ReferenceTest, AttentionOfOneToken) {
  passes::ModelOverrides o = Tiny(3);
  o.tokens = 1;
  const fb::ModuleT module = Import("vit-b16-224", "layer", o);
  const ReferenceResult result = RunOk(module);
  const ReferenceTensor* probs = result.FindByName("l0.attn.softmax.out");
  ASSERT_NE(probs, nullptr);
  EXPECT_EQ(probs->shape, (std::vector<int64_t>{3, 2, 1, 1}));
  for (float p : probs->data) EXPECT_EQ(p, 1.0f);
  // With one token the context is v itself: columns 2w.. of qkv.
  const ReferenceTensor* qkv = result.FindByName("l0.attn.qkv_bias.out");
  const ReferenceTensor* ctx = result.FindByName("l0.attn.ctx.out");
  ASSERT_NE(qkv, nullptr);
  ASSERT_NE(ctx, nullptr);
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t c = 0; c < 16; ++c) {
      EXPECT_EQ(ctx->data[r * 16 + c], qkv->data[r * 48 + 32 + c]);
    }
  }
}

// The whole SigLIP model on a tiny size: the MAP head's cross-attention
// (one probe query over every token) against double precision, and one
// finite output row per image.
TEST(ReferenceTest, SiglipModelWithMapHead) {
  passes::ModelOverrides o = Tiny(1);
  o.tokens = 9;
  o.layers = 2;
  o.patch = 2;
  const fb::ModuleT module = Import("siglip-so400m-384", "model", o);
  const ReferenceResult result = RunOk(module);
  int attention = 0;
  for (const auto& op : module.ops) {
    if (op->name.rfind("head.attn.", 0) != 0) continue;
    if (op->kind != fb::OpKind::AttentionScores &&
        op->kind != fb::OpKind::AttentionContext) {
      continue;
    }
    ++attention;
    CheckOp(*op, result);
  }
  EXPECT_EQ(attention, 2);
  const ReferenceTensor* scores = result.FindByName("head.attn.scores.out");
  ASSERT_NE(scores, nullptr);
  EXPECT_EQ(scores->shape, (std::vector<int64_t>{1, 2, 1, 9}));
  const std::vector<const ReferenceTensor*> outputs = result.Outputs();
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0]->shape, (std::vector<int64_t>{1, 16}));
  for (float v : outputs[0]->data) EXPECT_TRUE(std::isfinite(v));
}

TEST(ReferenceTest, InputsAndWeightsAreMaterialized) {
  const fb::ModuleT module = Import("vit-b16-224", "layer", Tiny(1));
  const ReferenceResult result = RunOk(module);
  for (const auto& value : module.values) {
    if (value->init == nullptr) continue;
    std::vector<float> expected;
    ASSERT_TRUE(MaterializeValue(*value, &expected).ok());
    EXPECT_EQ(Get(result, value->id).data, expected) << value->name;
  }
}

TEST(ReferenceTest, OutputsAndLookup) {
  const fb::ModuleT module = Import("vit-b16-224", "mlp-block", Tiny(1));
  const ReferenceResult result = RunOk(module);
  const std::vector<const ReferenceTensor*> outputs = result.Outputs();
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0]->name, "l0.mlp.residual.out");
  EXPECT_EQ(outputs[0]->shape, (std::vector<int64_t>{5, 16}));
  EXPECT_EQ(result.Find(outputs[0]->id), outputs[0]);
  EXPECT_EQ(result.FindByName("x")->id, 0u);
  EXPECT_EQ(result.Find(9999), nullptr);
  EXPECT_EQ(result.FindByName("nope"), nullptr);
}

// Large enough that GEMMs, attention and the row-wise kernels (LayerNorm,
// Softmax, GELU, adds: 65,536 elements and up) are split over threads: the
// thread count must not change a single bit.
TEST(ReferenceTest, DeterministicAcrossRunsAndThreadCounts) {
  const fb::ModuleT module =
      Import("siglip-so400m-384", "layer", Sized(128, 512, 1024, 4));
  ReferenceOptions one;
  one.threads = 1;
  const ReferenceResult base = RunOk(module, one);
  for (int threads : {1, 2, 3}) {
    ReferenceOptions options;
    options.threads = threads;
    const ReferenceResult other = RunOk(module, options);
    ASSERT_EQ(other.values().size(), base.values().size());
    for (size_t i = 0; i < base.values().size(); ++i) {
      const std::vector<float>& a = base.values()[i].data;
      const std::vector<float>& b = other.values()[i].data;
      ASSERT_EQ(a.size(), b.size());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
          << base.values()[i].name << " with " << threads << " threads";
    }
  }
}

TEST(ReferenceTest, ProvidedInputs) {
  const fb::ModuleT module = Import("vit-b16-224", "mlp-block", Tiny(1));
  ReferenceOptions options;
  options.provided[0] = std::vector<float>(5 * 16, 0.1f);
  const ReferenceResult result = RunOk(module, options);
  for (float f : Get(result, 0).data) EXPECT_EQ(f, RoundToF16(0.1f));

  ReferenceResult ignored;
  options.provided[0] = std::vector<float>(3, 0.0f);
  Status status = RunReference(module, options, &ignored);
  EXPECT_EQ(status.code(), StatusCode::kBadInput);
  EXPECT_NE(status.message().find("value 0 (x)"), std::string::npos)
      << status.message();
  options.provided.clear();
  options.provided[module.ops[0]->results[0]] = {};
  status = RunReference(module, options, &ignored);
  EXPECT_EQ(status.code(), StatusCode::kBadInput);
  EXPECT_NE(status.message().find("which an op computes"), std::string::npos);
}

// ---------------------------------------------------------------- by hand

// Builds modules value by value and op by op, for the kinds the importer
// does not produce.
class Graph {
 public:
  uint32_t Value(const std::string& name, std::vector<int64_t> shape,
                 fb::DType dtype = fb::DType::F16,
                 fb::ValueRole role = fb::ValueRole::Activation,
                 int fp8_scale_exp = 0) {
    auto v = std::make_unique<fb::ValueT>();
    v->id = static_cast<uint32_t>(module_.values.size());
    v->name = name;
    v->shape = std::move(shape);
    v->dtype = dtype;
    v->role = role;
    v->fp8_scale_exp = fp8_scale_exp;
    module_.values.push_back(std::move(v));
    return module_.values.back()->id;
  }

  uint32_t Gaussian(const std::string& name, std::vector<int64_t> shape,
                    float mean = 0.0f, float stddev = 1.0f) {
    const uint32_t id =
        Value(name, std::move(shape), fb::DType::F16, fb::ValueRole::Input);
    auto init = std::make_unique<fb::WeightInitT>();
    init->distribution = fb::Distribution::Gaussian;
    init->seed = 100 + id;
    init->mean = mean;
    init->stddev = stddev;
    module_.values[id]->init = std::move(init);
    return id;
  }

  fb::OperationT* Op(fb::OpKind kind, const std::string& name,
                     std::vector<uint32_t> operands,
                     std::vector<uint32_t> results) {
    auto op = std::make_unique<fb::OperationT>();
    op->id = static_cast<uint32_t>(module_.ops.size());
    op->kind = kind;
    op->name = name;
    op->operands = std::move(operands);
    op->results = std::move(results);
    module_.ops.push_back(std::move(op));
    return module_.ops.back().get();
  }

  static void Step(fb::OperationT* op, fb::FusedStepKind kind, int operand = -1,
                   fb::DType dtype = fb::DType::F16, int fp8_scale_exp = 0,
                   float scale = 1.0f) {
    auto step = std::make_unique<fb::FusedStepT>();
    step->kind = kind;
    step->operand = operand;
    step->gelu = fb::GeluForm::Tanh;
    step->dtype = dtype;
    step->fp8_scale_exp = fp8_scale_exp;
    step->scale = scale;
    op->body.push_back(std::move(step));
  }

  fb::ModuleT& module() { return module_; }

 private:
  fb::ModuleT module_;
};

constexpr int64_t kRows = 4, kWidth = 8;

TEST(ReferenceTest, FusedNormalizeMomentsCastRedistributeSoftmax) {
  Graph g;
  const uint32_t x = g.Gaussian("x", {kRows, kWidth});
  const uint32_t bias = g.Gaussian("bias", {kWidth}, 0.0f, 0.5f);
  const uint32_t res = g.Gaussian("res", {kRows, kWidth}, 2.0f, 1.0f);
  const uint32_t gamma = g.Gaussian("gamma", {kWidth}, 1.0f, 0.1f);
  const uint32_t beta = g.Gaussian("beta", {kWidth}, 0.0f, 0.1f);
  const uint32_t act = g.Value("act", {kRows, kWidth}, fb::DType::FP8E4M3,
                               fb::ValueRole::Activation, 3);
  const uint32_t sum = g.Value("sum", {kRows, kWidth});
  const uint32_t stats = g.Value("stats", {kRows, 3}, fb::DType::F32);
  const uint32_t norm = g.Value("norm", {kRows, kWidth});
  const uint32_t x_stats = g.Value("x_stats", {kRows, 3}, fb::DType::F32);
  const uint32_t moved = g.Value("moved", {kRows, kWidth}, fb::DType::FP8E5M2,
                                 fb::ValueRole::Activation, 2);
  const uint32_t cast = g.Value("cast", {kRows, kWidth}, fb::DType::FP8E4M3,
                                fb::ValueRole::Output, 4);
  const uint32_t probs =
      g.Value("probs", {kRows, kWidth}, fb::DType::F16, fb::ValueRole::Output);

  // bias + GELU + cast to FP8 (the MLP epilogue).
  fb::OperationT* epilogue =
      g.Op(fb::OpKind::Fused, "epilogue", {x, bias}, {act});
  Graph::Step(epilogue, fb::FusedStepKind::BiasAdd, 1);
  Graph::Step(epilogue, fb::FusedStepKind::Gelu);
  Graph::Step(epilogue, fb::FusedStepKind::Cast, -1, fb::DType::FP8E4M3, 3);
  // residual add, scale, statistics of the stored sum.
  fb::OperationT* residual =
      g.Op(fb::OpKind::Fused, "residual", {x, res}, {sum, stats});
  Graph::Step(residual, fb::FusedStepKind::ResidualAdd, 1);
  Graph::Step(residual, fb::FusedStepKind::Scale, -1, fb::DType::F16, 0, 0.5f);
  Graph::Step(residual, fb::FusedStepKind::Moments);
  g.Op(fb::OpKind::Normalize, "normalize", {sum, stats, gamma, beta}, {norm})
      ->eps = 1e-5f;
  g.Op(fb::OpKind::Moments, "moments", {x}, {x_stats});
  g.Op(fb::OpKind::Redistribute, "move", {sum}, {moved});
  g.Op(fb::OpKind::Cast, "cast", {norm}, {cast});
  g.Op(fb::OpKind::Softmax, "softmax", {x}, {probs})->scale = 0.25f;

  const ReferenceResult r = RunOk(g.module());
  const std::vector<float>& xd = Get(r, x).data;
  const std::vector<float>& bd = Get(r, bias).data;
  const std::vector<float>& rd = Get(r, res).data;

  // Epilogue: no rounding before the cast, then the scaled FP8 grid.
  for (int64_t i = 0; i < kRows * kWidth; ++i) {
    const double expected = GeluDouble(
        static_cast<double>(xd[i]) + bd[i % kWidth], fb::GeluForm::Tanh);
    const float actual = Get(r, act).data[i];
    EXPECT_EQ(actual, RoundToFp8(actual, Fp8Format::kE4M3, 3));
    EXPECT_LE(std::abs(actual - expected), Ulp(expected, 3, -6, 3))
        << i << ": " << actual << " vs " << expected;
  }
  // Residual: F16 sum, and the moments of exactly that stored sum.
  const std::vector<float>& sd = Get(r, sum).data;
  for (int64_t i = 0; i < kRows * kWidth; ++i) {
    ExpectF16Near(sd[i], (static_cast<double>(xd[i]) + rd[i]) * 0.5,
                  "sum " + std::to_string(i));
  }
  auto check_moments = [](const std::vector<float>& data,
                          const std::vector<float>& moments,
                          const std::string& what) {
    ASSERT_EQ(moments.size(), static_cast<size_t>(kRows * 3));
    for (int64_t row = 0; row < kRows; ++row) {
      double mean = 0, m2 = 0;
      for (int64_t c = 0; c < kWidth; ++c) mean += data[row * kWidth + c];
      mean /= kWidth;
      for (int64_t c = 0; c < kWidth; ++c) {
        m2 += (data[row * kWidth + c] - mean) * (data[row * kWidth + c] - mean);
      }
      EXPECT_EQ(moments[row * 3], kWidth) << what;
      EXPECT_NEAR(moments[row * 3 + 1], mean, 1e-6 * (1 + std::abs(mean)))
          << what;
      EXPECT_NEAR(moments[row * 3 + 2], m2, 1e-5 * (1 + m2)) << what;
    }
  };
  check_moments(sd, Get(r, stats).data, "fused moments");
  check_moments(xd, Get(r, x_stats).data, "moments op");
  // Normalize: LayerNorm of the stored sum.
  const std::vector<double> ln = LayerNormDouble(
      sd, kRows, kWidth, Get(r, gamma).data, Get(r, beta).data, 1e-5);
  for (int64_t i = 0; i < kRows * kWidth; ++i) {
    ExpectF16Near(Get(r, norm).data[i], ln[i], "norm " + std::to_string(i));
  }
  // Redistribute and Cast: one rounding from the F16 value, exactly.
  for (int64_t i = 0; i < kRows * kWidth; ++i) {
    EXPECT_EQ(Get(r, moved).data[i], RoundToFp8(sd[i], Fp8Format::kE5M2, 2));
    EXPECT_EQ(Get(r, cast).data[i],
              RoundToFp8(Get(r, norm).data[i], Fp8Format::kE4M3, 4));
  }
  // Softmax with a scale.
  const std::vector<double> sm = SoftmaxDouble(xd, kRows, kWidth, 0.25);
  for (int64_t i = 0; i < kRows * kWidth; ++i) {
    ExpectF16Near(Get(r, probs).data[i], sm[i], "probs " + std::to_string(i));
  }
  // The FP8 redistribution is visible: it changed some values.
  int changed = 0;
  for (int64_t i = 0; i < kRows * kWidth; ++i) {
    changed += Get(r, moved).data[i] != sd[i];
  }
  EXPECT_GT(changed, 0);
}

// Without a second result a Moments step has nothing to fill and the main
// result is unchanged.
TEST(ReferenceTest, FusedMomentsStepWithoutSecondResultIsSkipped) {
  Graph g;
  const uint32_t x = g.Gaussian("x", {kRows, kWidth});
  const uint32_t y = g.Value("y", {kRows, kWidth});
  const uint32_t z = g.Value("z", {kRows, kWidth});
  fb::OperationT* a = g.Op(fb::OpKind::Fused, "a", {x}, {y});
  Graph::Step(a, fb::FusedStepKind::Scale, -1, fb::DType::F16, 0, 3.0f);
  Graph::Step(a, fb::FusedStepKind::Moments);
  fb::OperationT* b = g.Op(fb::OpKind::Fused, "b", {x}, {z});
  Graph::Step(b, fb::FusedStepKind::Scale, -1, fb::DType::F16, 0, 3.0f);
  const ReferenceResult r = RunOk(g.module());
  EXPECT_EQ(Get(r, y).data, Get(r, z).data);
  for (int64_t i = 0; i < kRows * kWidth; ++i) {
    EXPECT_EQ(Get(r, y).data[i], RoundToF16(Get(r, x).data[i] * 3.0f));
  }
}

Status RunExpectingError(const fb::ModuleT& module) {
  ReferenceResult result;
  return RunReference(module, &result);
}

TEST(ReferenceTest, FusedSecondResultNeedsMomentsStep) {
  Graph g;
  const uint32_t x = g.Gaussian("x", {kRows, kWidth});
  const uint32_t y = g.Value("y", {kRows, kWidth});
  const uint32_t m = g.Value("m", {kRows, 3}, fb::DType::F32);
  fb::OperationT* op = g.Op(fb::OpKind::Fused, "f", {x}, {y, m});
  Graph::Step(op, fb::FusedStepKind::Scale, -1, fb::DType::F16, 0, 2.0f);
  const Status status = RunExpectingError(g.module());
  EXPECT_EQ(status.code(), StatusCode::kBadInput);
  EXPECT_NE(status.message().find("op 0 (Fused f)"), std::string::npos)
      << status.message();
}

TEST(ReferenceTest, BadBodiesAreBadInput) {
  {
    Graph g;  // a bias step naming a missing operand
    const uint32_t x = g.Gaussian("x", {kRows, kWidth});
    const uint32_t y = g.Value("y", {kRows, kWidth});
    Graph::Step(g.Op(fb::OpKind::Fused, "f", {x}, {y}),
                fb::FusedStepKind::BiasAdd, 3);
    EXPECT_EQ(RunExpectingError(g.module()).code(), StatusCode::kBadInput);
  }
  {
    Graph g;  // a bias of the wrong width
    const uint32_t x = g.Gaussian("x", {kRows, kWidth});
    const uint32_t b = g.Gaussian("b", {kWidth + 1});
    const uint32_t y = g.Value("y", {kRows, kWidth});
    Graph::Step(g.Op(fb::OpKind::Fused, "f", {x, b}, {y}),
                fb::FusedStepKind::BiasAdd, 1);
    const Status status = RunExpectingError(g.module());
    EXPECT_EQ(status.code(), StatusCode::kBadInput);
    EXPECT_NE(status.message().find("[9]"), std::string::npos)
        << status.message();
  }
  {
    Graph g;  // F16 moments
    const uint32_t x = g.Gaussian("x", {kRows, kWidth});
    const uint32_t m = g.Value("m", {kRows, 3}, fb::DType::F16);
    g.Op(fb::OpKind::Moments, "m", {x}, {m});
    EXPECT_EQ(RunExpectingError(g.module()).code(), StatusCode::kBadInput);
  }
}

// General steps in one body: sigmoid(x) * row, then y - that, then
// squared (Pow by a row of 2s), each in F32 until the F16 store; checked
// element by element against the same arithmetic written out.
TEST(ReferenceTest, FusedUnaryAndBinaryStepsInOrder) {
  Graph g;
  const uint32_t x = g.Gaussian("x", {kRows, kWidth});
  const uint32_t row = g.Gaussian("row", {kWidth});
  const uint32_t y = g.Gaussian("y", {kRows, kWidth});
  const uint32_t twos = g.Gaussian("twos", {kWidth}, 2.0f, 0.0f);
  const uint32_t z = g.Value("z", {kRows, kWidth});
  fb::OperationT* f = g.Op(fb::OpKind::Fused, "f", {x, row, y, twos}, {z});
  auto step = [&](fb::FusedStepKind kind, fb::ElementwiseFn fn, int operand,
                  fb::Broadcast broadcast, bool operand_first) {
    Graph::Step(f, kind, operand);
    f->body.back()->fn = fn;
    f->body.back()->broadcast = broadcast;
    f->body.back()->operand_first = operand_first;
  };
  step(fb::FusedStepKind::Unary, fb::ElementwiseFn::Sigmoid, -1,
       fb::Broadcast::Full, false);
  step(fb::FusedStepKind::Binary, fb::ElementwiseFn::Mul, 1,
       fb::Broadcast::Row, false);
  step(fb::FusedStepKind::Binary, fb::ElementwiseFn::Sub, 2,
       fb::Broadcast::Full, true);
  step(fb::FusedStepKind::Binary, fb::ElementwiseFn::Pow, 3,
       fb::Broadcast::Row, false);
  const ReferenceResult r = RunOk(g.module());
  const auto& xv = Get(r, x).data;
  const auto& rv = Get(r, row).data;
  const auto& yv = Get(r, y).data;
  for (int64_t i = 0; i < kRows * kWidth; ++i) {
    const float s = 1.0f / (1.0f + std::exp(-xv[i]));
    const float d = yv[i] - s * rv[i % kWidth];
    EXPECT_EQ(Get(r, z).data[i], RoundToF16(std::pow(d, 2.0f))) << i;
  }
  // A Binary step with a unary function, and a row operand of the wrong
  // width, are bad input naming the op.
  f->body[1]->fn = fb::ElementwiseFn::Relu;
  Status status = RunExpectingError(g.module());
  EXPECT_EQ(status.code(), StatusCode::kBadInput);
  EXPECT_NE(status.message().find("Binary with a unary function"),
            std::string::npos)
      << status.message();
  f->body[1]->fn = fb::ElementwiseFn::Mul;
  f->body[1]->broadcast = fb::Broadcast::Full;
  status = RunExpectingError(g.module());
  EXPECT_EQ(status.code(), StatusCode::kBadInput);
  EXPECT_NE(status.message().find("operand 1 has shape [8], expected [4,8]"),
            std::string::npos)
      << status.message();
}

// A Column step: each row of x divided by that row's value of a [rows, 1]
// column (c / x with operand_first), element by element against the same
// arithmetic; a column of another length is bad input naming the shapes.
TEST(ReferenceTest, FusedColumnStepAppliesEachRowsValue) {
  Graph g;
  const uint32_t x = g.Gaussian("x", {kRows, kWidth});
  const uint32_t col = g.Gaussian("col", {kRows, 1});
  const uint32_t z = g.Value("z", {kRows, kWidth});
  fb::OperationT* f = g.Op(fb::OpKind::Fused, "f", {x, col}, {z});
  Graph::Step(f, fb::FusedStepKind::Binary, 1);
  f->body.back()->fn = fb::ElementwiseFn::Div;
  f->body.back()->broadcast = fb::Broadcast::Column;
  f->body.back()->operand_first = true;
  const ReferenceResult r = RunOk(g.module());
  const auto& xv = Get(r, x).data;
  const auto& cv = Get(r, col).data;
  for (int64_t i = 0; i < kRows * kWidth; ++i) {
    EXPECT_EQ(Get(r, z).data[i], RoundToF16(cv[i / kWidth] / xv[i])) << i;
  }
  f->body.back()->broadcast = fb::Broadcast::Row;  // reads col as a [w] row
  const Status status = RunExpectingError(g.module());
  EXPECT_EQ(status.code(), StatusCode::kBadInput);
  EXPECT_NE(status.message().find("operand 1 has shape [4,1], expected [8]"),
            std::string::npos)
      << status.message();
}

// The patches of a [2, 2, 4, 6] image with p = 2: every element of the
// result is checked against its (b, c, y, x) source by the formula that
// ONNX's conv weight flattening implies.
TEST(ReferenceTest, PatchifyGathersPatchesInChannelRowColumnOrder) {
  // 5 x 7 pixels: the last row and column fill no patch and are dropped.
  constexpr int64_t kB = 2, kC = 2, kH = 5, kW = 7, kP = 2;
  constexpr int64_t kGridW = kW / kP, kTokens = (kH / kP) * kGridW;
  Graph g;
  const uint32_t image = g.Value("image", {kB, kC, kH, kW}, fb::DType::F32,
                                 fb::ValueRole::Input);
  const uint32_t patches =
      g.Value("patches", {kB * kTokens, kC * kP * kP}, fb::DType::F32,
              fb::ValueRole::Output);
  g.Op(fb::OpKind::Patchify, "patchify", {image}, {patches})->patch = kP;
  ReferenceOptions options;
  std::vector<float> pixels(kB * kC * kH * kW);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>(i);
  options.provided[image] = pixels;
  const ReferenceResult result = RunOk(g.module(), options);
  const std::vector<float>& out = Get(result, patches).data;
  ASSERT_EQ(out.size(), static_cast<size_t>(kB * kTokens * kC * kP * kP));
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t t = 0; t < kTokens; ++t) {
      for (int64_t c = 0; c < kC; ++c) {
        for (int64_t ky = 0; ky < kP; ++ky) {
          for (int64_t kx = 0; kx < kP; ++kx) {
            const int64_t y = (t / kGridW) * kP + ky, x = (t % kGridW) * kP + kx;
            const int64_t row = b * kTokens + t, col = (c * kP + ky) * kP + kx;
            EXPECT_EQ(out[row * kC * kP * kP + col],
                      pixels[((b * kC + c) * kH + y) * kW + x])
                << "row " << row << " column " << col;
          }
        }
      }
    }
  }
}

// A class token before each of 2 images' 3 patches, then each image's class
// row picked back out: every element lands where its segment says.
TEST(ReferenceTest, CopyRowsMovesRowsExactly) {
  constexpr int64_t kB = 2, kP = 3, kD = 4;
  Graph g;
  const uint32_t cls = g.Gaussian("cls", {1, kD});
  const uint32_t patches = g.Gaussian("patches", {kB * kP, kD});
  const uint32_t tokens = g.Value("tokens", {kB * (kP + 1), kD});
  const uint32_t heads = g.Value("heads", {kB, kD}, fb::DType::F16,
                                 fb::ValueRole::Output);
  fb::OperationT* prepend = g.Op(fb::OpKind::CopyRows, "embed.class",
                                 {cls, patches}, {tokens});
  fb::OperationT* pick = g.Op(fb::OpKind::CopyRows, "head.pick", {tokens},
                              {heads});
  auto segment = [](fb::OperationT* op, uint32_t operand, int64_t first,
                    int64_t count, int64_t at) {
    ir::AppendRowSegment({operand, first, count, at}, op);
  };
  for (int64_t b = 0; b < kB; ++b) {
    segment(prepend, 0, 0, 1, b * (kP + 1));
    segment(prepend, 1, b * kP, kP, b * (kP + 1) + 1);
    segment(pick, 0, b * (kP + 1), 1, b);
  }
  const ReferenceResult result = RunOk(g.module());
  const std::vector<float>& c = Get(result, cls).data;
  const std::vector<float>& p = Get(result, patches).data;
  const std::vector<float>& t = Get(result, tokens).data;
  const std::vector<float>& h = Get(result, heads).data;
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t j = 0; j < kD; ++j) {
      EXPECT_EQ(t[b * (kP + 1) * kD + j], c[j]);
      EXPECT_EQ(h[b * kD + j], c[j]);
      for (int64_t i = 0; i < kP; ++i) {
        EXPECT_EQ(t[(b * (kP + 1) + 1 + i) * kD + j], p[(b * kP + i) * kD + j]);
      }
    }
  }
  // A segment past its operand is the shape rule's refusal, not a crash.
  prepend->rows[1]->first = 4;
  EXPECT_EQ(RunExpectingError(g.module()).code(), StatusCode::kBadInput);
}

TEST(ReferenceTest, UnknownKindIsBadInputNamingTheOp) {
  Graph g;
  const uint32_t x = g.Gaussian("x", {kRows, kWidth});
  const uint32_t y = g.Value("y", {kRows, kWidth});
  const uint32_t z = g.Value("z", {kRows, kWidth});
  g.Op(fb::OpKind::Gelu, "ok", {x}, {y});
  g.Op(static_cast<fb::OpKind>(200), "mystery", {y}, {z});
  const Status status = RunExpectingError(g.module());
  EXPECT_EQ(status.code(), StatusCode::kBadInput);
  EXPECT_NE(status.message().find("op 1"), std::string::npos)
      << status.message();
}

TEST(ReferenceTest, ValueWithoutContentsIsBadInput) {
  Graph g;
  const uint32_t x =
      g.Value("x", {kRows, kWidth}, fb::DType::F16, fb::ValueRole::Input);
  const uint32_t y = g.Value("y", {kRows, kWidth});
  g.Op(fb::OpKind::Gelu, "g", {x}, {y});
  const Status status = RunExpectingError(g.module());
  EXPECT_EQ(status.code(), StatusCode::kBadInput);
  EXPECT_NE(status.message().find("value 0 (x)"), std::string::npos)
      << status.message();
}

TEST(ReferenceTest, UseBeforeDefinitionIsBadInput) {
  Graph g;
  const uint32_t x = g.Gaussian("x", {kRows, kWidth});
  const uint32_t y = g.Value("y", {kRows, kWidth});
  const uint32_t z = g.Value("z", {kRows, kWidth});
  g.Op(fb::OpKind::Gelu, "first", {y}, {z});
  g.Op(fb::OpKind::Gelu, "second", {x}, {y});
  const Status status = RunExpectingError(g.module());
  EXPECT_EQ(status.code(), StatusCode::kBadInput);
  EXPECT_NE(status.message().find("used before"), std::string::npos)
      << status.message();
}

// GEMMs with an FP8 operand sum in the tile kernels' k order unless the
// options let OpenBLAS take them too (quantize-fp8's accuracy run). Either
// way each sum is the exact product to F32 summation error: at most
// gamma_k * sum_p |a_ip b_pj| <= gamma_k * k * max|a| * max|b|
// (kernels/blas.h).
TEST(ReferenceTest, Fp8GemmsInEitherOrderAreTheProductToF32Error) {
  constexpr int64_t kTokens = 24, kHeads = 2, kHeadDim = 40, kK = 96, kN = 40;
  Graph g;
  auto fp8 = [&g](const std::string& name, std::vector<int64_t> shape) {
    const uint32_t id = g.Gaussian(name, std::move(shape), 0.0f, 4.0f);
    g.module().values[id]->dtype = fb::DType::FP8E4M3;
    return id;
  };
  const uint32_t a = fp8("a", {kTokens, kK});
  const uint32_t b = fp8("b", {kK, kN});
  const uint32_t qkv = fp8("qkv", {kTokens, 3 * kHeads * kHeadDim});
  const uint32_t probs = fp8("probs", {1, kHeads, kTokens, kTokens});
  const uint32_t c = g.Value("c", {kTokens, kN}, fb::DType::F32);
  const uint32_t scores =
      g.Value("scores", {1, kHeads, kTokens, kTokens}, fb::DType::F32);
  const uint32_t ctx =
      g.Value("ctx", {kTokens, kHeads * kHeadDim}, fb::DType::F32);
  g.Op(fb::OpKind::MatMul, "matmul", {a, b}, {c});
  for (fb::OperationT* op :
       {g.Op(fb::OpKind::AttentionScores, "scores", {qkv}, {scores}),
        g.Op(fb::OpKind::AttentionContext, "ctx", {probs, qkv}, {ctx})}) {
    op->heads = kHeads;
    op->head_dim = kHeadDim;
    op->scale = 1.0f;
  }
  const std::map<fb::OpKind, int64_t> sum_length = {
      {fb::OpKind::MatMul, kK},
      {fb::OpKind::AttentionScores, kHeadDim},
      {fb::OpKind::AttentionContext, kTokens}};
  for (bool k_order : {true, false}) {
    ReferenceOptions options;
    options.fp8_in_k_order = k_order;
    const ReferenceResult r = RunOk(g.module(), options);
    for (const auto& op : g.module().ops) {
      double largest = 0;
      for (uint32_t operand : op->operands) {
        for (float x : Get(r, operand).data) {
          largest = std::max(largest, std::abs(static_cast<double>(x)));
        }
      }
      const double k = static_cast<double>(sum_length.at(op->kind));
      const double u = std::ldexp(1.0, -24);
      const double bound = k * u / (1 - k * u) * k * largest * largest;
      const std::vector<double> expected = ExpectedDouble(*op, r);
      const std::vector<float>& actual = Get(r, op->results[0]).data;
      ASSERT_EQ(actual.size(), expected.size()) << op->name;
      for (size_t i = 0; i < actual.size(); ++i) {
        ASSERT_LE(std::abs(actual[i] - expected[i]), bound)
            << op->name << " element " << i << ", k order " << k_order;
      }
    }
  }
}

// ---------------------------------------------------------------- reports

TEST(ReferenceTest, StatsAndSummaryLine) {
  ReferenceTensor t;
  t.name = "out";
  t.shape = {2, 2};
  t.dtype = fb::DType::F16;
  t.data = {1.0f, -2.0f, 3.0f, NAN};
  const TensorStats s = ComputeStats(t.data);
  EXPECT_EQ(s.count, 4u);
  EXPECT_EQ(s.nonfinite, 1u);
  EXPECT_EQ(s.min, -2.0);
  EXPECT_EQ(s.max, 3.0);
  EXPECT_NEAR(s.mean, 2.0 / 3.0, 1e-12);
  EXPECT_NEAR(s.l2, std::sqrt(14.0), 1e-12);
  EXPECT_EQ(SummaryLine(t),
            "out [2,2] f16 min=-2 max=3 mean=0.666667 l2=3.74166 "
            "nonfinite=1");
  t.dtype = fb::DType::FP8E4M3;
  t.fp8_scale_exp = -2;
  t.data = {};
  EXPECT_EQ(SummaryLine(t),
            "out [2,2] fp8e4m3(scale_exp=-2) min=0 max=0 mean=0 l2=0 "
            "nonfinite=0");
}

TEST(ReferenceTest, SafeFileNames) {
  EXPECT_EQ(SafeFileName("l0.mlp.up.out"), "l0.mlp.up.out");
  EXPECT_EQ(SafeFileName("a/b c:d"), "a_b_c_d");
  EXPECT_EQ(SafeFileName("../etc"), "_._etc");
  EXPECT_EQ(SafeFileName(".hidden"), "_hidden");
}

TEST(ReferenceTest, WriteTensorFiles) {
  const std::string dir = ::testing::TempDir() + "/ref_files/sub";
  ReferenceTensor a;
  a.id = 1;
  a.name = "a/b";
  a.shape = {3};
  a.dtype = fb::DType::FP8E4M3;
  a.fp8_scale_exp = 2;
  a.data = {1.0f, 0.5f, -0.25f};
  ReferenceTensor clash = a;  // the same file name
  clash.id = 2;
  clash.name = "a_b";
  clash.dtype = fb::DType::F32;
  ReferenceTensor unnamed;
  unnamed.id = 3;
  unnamed.shape = {1};
  unnamed.dtype = fb::DType::F32;
  unnamed.data = {4.0f};
  const std::vector<const ReferenceTensor*> tensors = {&a, &clash, &unnamed};
  std::vector<std::string> paths;
  const Status status = WriteTensorFiles(tensors, dir, &paths);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(paths, (std::vector<std::string>{
                       dir + "/a_b.npy", dir + "/a_b.fp8e4m3.npy",
                       dir + "/a_b_v2.npy", dir + "/value3.npy"}));
  std::vector<int64_t> shape;
  std::vector<float> values;
  ASSERT_TRUE(ReadNpyF32(dir + "/a_b.npy", &shape, &values).ok());
  EXPECT_EQ(shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(values, a.data);
  std::string bytes;
  ASSERT_TRUE(ir::ReadFile(dir + "/a_b.fp8e4m3.npy", &bytes).ok());
  NpyArray raw;
  ASSERT_TRUE(ParseNpy(bytes, "raw", &raw).ok());
  EXPECT_EQ(raw.descr, "|u1");
  EXPECT_EQ(raw.data, a.StoredBytes());
  EXPECT_EQ(static_cast<uint8_t>(raw.data[0]),
            Fp8Encode(1.0f, Fp8Format::kE4M3, 2));
}

// ---------------------------------------------------------------- repeats

// import-model's `part` with `layers` layers, rolled into a repeat or
// written out (docs/repeat.md: the same computation).
fb::ModuleT Layers(std::string_view part, int64_t layers, bool repeat) {
  passes::ModelOverrides o = Sized(16, 64, 128, 2);
  o.layers = layers;
  o.repeat = repeat;
  return Import("siglip-so400m-384", part, o);
}

// The written-out name of a rolled body value in `iteration`: "l0.x" ->
// "l<iteration>.x".
std::string LayerName(const std::string& name, uint32_t iteration) {
  if (name.rfind("l0.", 0) != 0) return name;
  return "l" + std::to_string(iteration) + name.substr(2);
}

void ExpectSameBits(const ReferenceTensor& got, const ReferenceTensor& want) {
  ASSERT_EQ(got.shape, want.shape) << got.name;
  ASSERT_EQ(got.data.size(), want.data.size()) << got.name;
  for (size_t i = 0; i < got.data.size(); ++i) {
    ASSERT_EQ(std::memcmp(&got.data[i], &want.data[i], sizeof(float)), 0)
        << got.name << " vs " << want.name << " element " << i << ": "
        << got.data[i] << " vs " << want.data[i];
  }
}

struct RolledCase {
  std::string part;
  int64_t layers;
};

class RolledReferenceTest : public testing::TestWithParam<RolledCase> {};

TEST_P(RolledReferenceTest, OutputsBitIdenticalToWrittenOut) {
  const fb::ModuleT rolled = Layers(GetParam().part, GetParam().layers, true);
  const fb::ModuleT written = Layers(GetParam().part, GetParam().layers, false);
  ASSERT_EQ(rolled.repeats.size(), 1u);
  ASSERT_TRUE(written.repeats.empty());
  for (ReferenceOptions::Keep keep :
       {ReferenceOptions::Keep::kAll, ReferenceOptions::Keep::kOutputs,
        ReferenceOptions::Keep::kInputsAndOutputs}) {
    ReferenceOptions options;
    options.keep = keep;
    const ReferenceResult r = RunOk(rolled, options);
    const ReferenceResult w = RunOk(written, options);
    ASSERT_EQ(r.Outputs().size(), 1u);
    ASSERT_EQ(w.Outputs().size(), 1u);
    ExpectSameBits(*r.Outputs()[0], *w.Outputs()[0]);
  }
}

TEST_P(RolledReferenceTest, BodyValuesHoldTheLastIterationTwinsTheirOwn) {
  const fb::ModuleT rolled = Layers(GetParam().part, GetParam().layers, true);
  const fb::ModuleT written = Layers(GetParam().part, GetParam().layers, false);
  const ReferenceResult r = RunOk(rolled);
  const ReferenceResult w = RunOk(written);
  const uint32_t last = rolled.repeats[0]->count - 1;
  size_t compared = 0;
  for (const ReferenceTensor& t : r.values()) {
    // Inputs keep their name; body values and weights are layer 0's and
    // hold the last iteration's (weights: their own, iteration 0's).
    const std::string want =
        t.role == fb::ValueRole::Activation || t.role == fb::ValueRole::Output
            ? LayerName(t.name, last)
            : t.name;
    const ReferenceTensor* other = w.FindByName(want);
    ASSERT_NE(other, nullptr) << want;
    ExpectSameBits(t, *other);
    ++compared;
  }
  EXPECT_EQ(compared, r.values().size());
}

TEST_P(RolledReferenceTest, ObserverSeesEveryIteration) {
  const fb::ModuleT rolled = Layers(GetParam().part, GetParam().layers, true);
  const fb::ModuleT written = Layers(GetParam().part, GetParam().layers, false);
  const ReferenceResult w = RunOk(written);
  ReferenceOptions options;
  options.keep = ReferenceOptions::Keep::kOutputs;
  size_t seen = 0;
  std::set<std::pair<std::string, uint32_t>> named;
  options.observe = [&](const ReferenceTensor& t, uint32_t iteration) {
    ++seen;
    named.emplace(t.name, iteration);
    const ReferenceTensor* want = w.FindByName(LayerName(t.name, iteration));
    ASSERT_NE(want, nullptr) << t.name << " iteration " << iteration;
    ExpectSameBits(t, *want);
  };
  RunOk(rolled, options);
  // Every op result of every iteration, once; ops outside the body once.
  StatusOr<std::vector<ir::RepeatBody>> bodies = ir::RepeatBodies(rolled);
  ASSERT_TRUE(bodies.ok());
  const size_t body = (*bodies)[0].end - (*bodies)[0].begin;
  EXPECT_EQ(seen,
            body * rolled.repeats[0]->count + (rolled.ops.size() - body));
  EXPECT_EQ(named.size(), seen);
}

// Every weight, twin and input the run makes is shown unrounded, on the
// threads that make them; rounded, it is what the run computes with.
TEST_P(RolledReferenceTest, SourceObserverSeesEverySourceUnrounded) {
  const fb::ModuleT rolled = Layers(GetParam().part, GetParam().layers, true);
  ReferenceOptions options;
  options.keep = ReferenceOptions::Keep::kOutputs;
  options.threads = 2;
  std::mutex mu;
  std::map<uint32_t, std::vector<float>> seen;
  options.observe_source = [&](const fb::ValueT& v,
                               std::span<const float> unrounded) {
    std::lock_guard<std::mutex> lock(mu);
    seen[v.id].assign(unrounded.begin(), unrounded.end());
  };
  RunOk(rolled, options);
  size_t sources = 0, changed_by_rounding = 0;
  for (const auto& value : rolled.values) {
    if (value->init == nullptr) continue;
    ++sources;
    auto it = seen.find(value->id);
    ASSERT_NE(it, seen.end()) << value->name;
    std::vector<float> unrounded, rounded;
    ASSERT_TRUE(MaterializeUnrounded(*value, ".", &unrounded).ok());
    ASSERT_TRUE(MaterializeValue(*value, &rounded).ok());
    EXPECT_EQ(it->second, unrounded) << value->name;
    if (unrounded != rounded) ++changed_by_rounding;
  }
  EXPECT_EQ(seen.size(), sources);
  EXPECT_GT(changed_by_rounding, 0u);
}

TEST_P(RolledReferenceTest, OutputsOnlyFreesTwinsAfterTheirIteration) {
  const fb::ModuleT rolled = Layers(GetParam().part, GetParam().layers, true);
  ReferenceOptions options;
  options.keep = ReferenceOptions::Keep::kOutputs;
  const ReferenceResult r = RunOk(rolled, options);
  for (uint32_t twin : rolled.repeats[0]->iteration_weights) {
    EXPECT_TRUE(Get(r, twin).data.empty()) << Get(r, twin).name;
  }
  EXPECT_FALSE(r.Outputs()[0]->data.empty());
}

// Freed values' memory is written over by later results and sources
// without being cleared (Executor::NewBuffer): a run that frees every value
// it can gives the bits of one that frees none, on values large enough to
// be recycled.
TEST(ReferenceTest, RecycledMemoryChangesNoOutput) {
  passes::ModelOverrides o = Sized(256, 256, 1024, 4);
  o.layers = 3;
  o.repeat = true;
  const fb::ModuleT module = Import("siglip-so400m-384", "model", o);
  ReferenceOptions all, outputs;
  all.keep = ReferenceOptions::Keep::kAll;
  outputs.keep = ReferenceOptions::Keep::kOutputs;
  const ReferenceResult kept = RunOk(module, all);
  const ReferenceResult freed = RunOk(module, outputs);
  ASSERT_FALSE(freed.Outputs().empty());
  for (const ReferenceTensor* out : freed.Outputs()) {
    ExpectSameBits(*out, Get(kept, out->id));
  }
}

INSTANTIATE_TEST_SUITE_P(Parts, RolledReferenceTest,
                         testing::Values(RolledCase{"mlp-block", 3},
                                         RolledCase{"model", 2}),
                         [](const testing::TestParamInfo<RolledCase>& info) {
                           std::string name = info.param.part +
                                              std::to_string(info.param.layers);
                           std::erase(name, '-');
                           return name;
                         });

// Ops before and after the body: the body starts from the prefix's result
// and the ops after it read the last iteration's.
TEST(ReferenceTest, OpsAroundTheBodyRunOnce) {
  auto wrap = [](fb::ModuleT& m) {
    // prefix: pre = gelu(x), read where x was; suffix: post = gelu(out).
    const uint32_t x = m.values[0]->id;
    uint32_t out = 0;
    for (auto& v : m.values) {
      if (v->role == fb::ValueRole::Output) {
        out = v->id;
        v->role = fb::ValueRole::Activation;
      }
    }
    for (auto& op : m.ops)
      std::replace(op->operands.begin(), op->operands.end(), x, 1000u);
    auto value = [&](uint32_t id, const std::string& name, fb::ValueRole role) {
      auto v = std::make_unique<fb::ValueT>();
      v->id = id;
      v->name = name;
      v->shape = m.values[0]->shape;
      v->dtype = m.values[0]->dtype;
      v->role = role;
      m.values.push_back(std::move(v));
    };
    value(1000, "pre", fb::ValueRole::Activation);
    value(1001, "post", fb::ValueRole::Output);
    auto gelu = [&](uint32_t id, uint32_t in, uint32_t result) {
      auto op = std::make_unique<fb::OperationT>();
      op->id = id;
      op->kind = fb::OpKind::Gelu;
      op->operands = {in};
      op->results = {result};
      return op;
    };
    m.ops.insert(m.ops.begin(), gelu(1000, x, 1000));
    m.ops.push_back(gelu(1001, out, 1001));
    for (auto& r : m.repeats) r->carried_in = 1000;
  };
  fb::ModuleT rolled = Layers("mlp-block", 3, true);
  fb::ModuleT written = Layers("mlp-block", 3, false);
  wrap(rolled);
  wrap(written);
  ASSERT_TRUE(ir::VerifyRepeats(rolled).ok());
  for (ReferenceOptions::Keep keep :
       {ReferenceOptions::Keep::kAll, ReferenceOptions::Keep::kOutputs}) {
    ReferenceOptions options;
    options.keep = keep;
    const ReferenceResult r = RunOk(rolled, options);
    const ReferenceResult w = RunOk(written, options);
    ExpectSameBits(*r.FindByName("post"), *w.FindByName("post"));
  }
}

// A value made before the body and read in it is read by every iteration:
// freeing it after its last reader in iteration 0 would lose it.
TEST(ReferenceTest, LoopInvariantLivesThroughEveryIteration) {
  fb::ModuleT rolled = Layers("mlp-block", 3, true);
  fb::ModuleT written = Layers("mlp-block", 3, false);
  // Each layer's residual adds the graph input instead of its own input:
  // the input becomes loop-invariant (read by the body, not carried).
  auto rewire = [](fb::ModuleT& m) {
    for (auto& op : m.ops) {
      if (op->kind == fb::OpKind::Add) op->operands[0] = 0;
    }
  };
  rewire(written);
  // In the rolled graph the carried value then is read only by the
  // LayerNorm; a new input is the invariant residual.
  auto x2 = std::make_unique<fb::ValueT>(*rolled.values[0]);
  x2->id = 1000;
  x2->name = "x";
  rolled.values[0]->name = "x.carried";
  rolled.values.push_back(std::move(x2));
  for (auto& op : rolled.ops) {
    if (op->kind == fb::OpKind::Add) op->operands[0] = 1000;
  }
  ReferenceOptions options;
  options.keep = ReferenceOptions::Keep::kOutputs;
  const ReferenceResult r = RunOk(rolled, options);
  const ReferenceResult w = RunOk(written, options);
  ExpectSameBits(*r.Outputs()[0], *w.Outputs()[0]);
}

}  // namespace
}  // namespace tilec::kernels
