#include "passes/quantize/quantize.h"

#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <future>
#include <limits>
#include <optional>
#include <sstream>
#include <thread>

#include "formats/ir.h"
#include "formats/repeat.h"
#include "kernels/numerics.h"
#include "passes/import/model_builder.h"
#include "passes/plan/planner.h"
#include "passes/quantize/policy.h"
#include "passes/quantize/scale.h"
#include "passes/quantize/support.h"
#include "passes/quantize/trial_prices.h"
#include "sim/accuracy.h"
#include "sim/npy.h"
#include "sim/reference.h"
#include "sim/tensor_data.h"

namespace tilec::quantize {
namespace {

using kernels::Fp8Format;

TEST(ScaleTest, ExponentFitsAmaxIntoTheFormat) {
  EXPECT_EQ(ChooseScaleExp(448.0f, Fp8Format::kE4M3, 0), 0);
  EXPECT_EQ(ChooseScaleExp(1.0f, Fp8Format::kE4M3, 0), 8);
  EXPECT_EQ(ChooseScaleExp(449.0f, Fp8Format::kE4M3, 0), -1);
  EXPECT_EQ(ChooseScaleExp(57344.0f, Fp8Format::kE5M2, 0), 0);
  // The margin gives up range for headroom.
  EXPECT_EQ(ChooseScaleExp(1.0f, Fp8Format::kE4M3, 1), 7);
}

TEST(ScaleTest, NoRangeToFitGivesExponentZero) {
  EXPECT_EQ(ChooseScaleExp(0.0f, Fp8Format::kE4M3, 1), 0);
  EXPECT_EQ(ChooseScaleExp(std::numeric_limits<float>::quiet_NaN(),
                           Fp8Format::kE4M3, 0),
            0);
  EXPECT_EQ(ChooseScaleExp(std::numeric_limits<float>::infinity(),
                           Fp8Format::kE4M3, 0),
            0);
}

TEST(ScaleTest, AmaxIgnoresNonFiniteElements) {
  const std::vector<float> data = {1.5f, -3.0f,
                                   std::numeric_limits<float>::infinity(),
                                   std::numeric_limits<float>::quiet_NaN()};
  EXPECT_EQ(FiniteAmax(data), 3.0f);
  EXPECT_EQ(FiniteAmax({}), 0.0f);
}

TEST(ScaleTest, CountsSaturatedAndFlushedElements) {
  // E4M3 at 2^0: 1000 clamps to 448, 2^-12 is below half the smallest
  // subnormal (2^-9) and stores as 0, 0 itself is not "flushed".
  const std::vector<float> data = {1000.0f, -500.0f, 1.0f,
                                   std::ldexp(1.0f, -12), 0.0f};
  QuantStats s = Measure(data, Fp8Format::kE4M3, 0);
  EXPECT_EQ(s.amax, 1000.0f);
  EXPECT_DOUBLE_EQ(s.saturated, 2.0 / 5);
  EXPECT_DOUBLE_EQ(s.flushed, 1.0 / 5);
  // Scaled down by 2^-2 nothing saturates; the small value flushes further.
  s = Measure(data, Fp8Format::kE4M3, -2);
  EXPECT_DOUBLE_EQ(s.saturated, 0);
  EXPECT_DOUBLE_EQ(s.flushed, 1.0 / 5);
  // 448 exactly fits.
  s = Measure(std::vector<float>{448.0f}, Fp8Format::kE4M3, 0);
  EXPECT_DOUBLE_EQ(s.saturated, 0);
}

// Measure element by element, as the encoder stores each element.
QuantStats MeasureEachElement(const std::vector<float>& data, Fp8Format fmt,
                              int scale_exp) {
  QuantStats s;
  size_t saturated = 0, flushed = 0;
  for (float x : data) {
    if (!std::isfinite(x)) continue;
    s.amax = std::max(s.amax, std::fabs(x));
    if (std::fabs(static_cast<double>(x)) * std::ldexp(1.0, scale_exp) >
        kernels::Fp8MaxFinite(fmt)) {
      ++saturated;
    } else if (x != 0 && kernels::RoundToFp8(x, fmt, scale_exp) == 0) {
      ++flushed;
    }
  }
  s.saturated = static_cast<double>(saturated) / data.size();
  s.flushed = static_cast<double>(flushed) / data.size();
  return s;
}

// The histogram is exact: every format and exponent, on magnitudes across
// many binades including the thresholds themselves (1.75 * 2^k saturates
// only above, 2^k flushes on the tie) and subnormal floats, added in parts.
TEST(ScaleTest, HistogramMeasuresExactlyAsEachElement) {
  std::vector<float> data;
  uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  const float significands[] = {1.0f,       1.5f,       1.75f,     1.875f,
                                1.7499999f, 1.7500001f, 1.0000001f};
  for (int k = -40; k <= 24; ++k) {
    for (float m : significands) data.push_back(std::ldexp(m, k));
    for (int i = 0; i < 20; ++i) {
      const float m = 1.0f + static_cast<float>(next() % 8388608) / 8388608;
      data.push_back((next() % 2 ? -1 : 1) * std::ldexp(m, k));
    }
  }
  data.push_back(std::numeric_limits<float>::denorm_min() * 3);
  data.push_back(std::numeric_limits<float>::quiet_NaN());
  data.push_back(0.0f);
  MagnitudeHistogram h;
  const size_t half = data.size() / 2;
  h.Add(std::span<const float>(data).first(half));
  h.Add(std::span<const float>(data).subspan(half));
  EXPECT_EQ(h.count(), data.size());
  for (Fp8Format fmt : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    for (int e = -30; e <= 40; ++e) {
      const QuantStats want = MeasureEachElement(data, fmt, e);
      const QuantStats got = h.Measure(fmt, e);
      EXPECT_EQ(got.amax, want.amax);
      EXPECT_EQ(got.saturated, want.saturated) << "exp " << e;
      EXPECT_EQ(got.flushed, want.flushed) << "exp " << e;
      EXPECT_GT(want.saturated + want.flushed, 0) << "exp " << e;
    }
  }
}

// Any bit pattern (every binade, subnormals, zeros, infinities, NaNs),
// added in parts of odd sizes: the counts are those of each element.
TEST(ScaleTest, HistogramCountsEveryBitPatternAsItsElement) {
  std::vector<float> data;
  uint64_t state = 987654321;
  for (int i = 0; i < 20000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    data.push_back(std::bit_cast<float>(static_cast<uint32_t>(state >> 32)));
  }
  for (uint32_t bits : {0x00000000u, 0x80000000u, 0x00000001u, 0x007fffffu,
                        0x00400000u, 0x7f7fffffu, 0x7f800000u, 0xff800000u}) {
    data.push_back(std::bit_cast<float>(bits));
  }
  MagnitudeHistogram h;
  std::span<const float> rest(data);
  for (size_t part : {1, 3, 7, 4, 5}) {
    h.Add(rest.first(part));
    rest = rest.subspan(part);
  }
  h.Add(rest);
  EXPECT_EQ(h.count(), data.size());
  for (Fp8Format fmt : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    for (int e = -150; e <= 150; e += 3) {
      const QuantStats want = MeasureEachElement(data, fmt, e);
      const QuantStats got = h.Measure(fmt, e);
      EXPECT_EQ(got.amax, want.amax);
      EXPECT_EQ(got.saturated, want.saturated) << "exp " << e;
      EXPECT_EQ(got.flushed, want.flushed) << "exp " << e;
    }
  }
}

// The vector loop (where the host has AVX-512) counts as the portable one:
// long runs of normal elements of a few binades, as weights are, broken by
// every kind of element it leaves to the portable loop, added in parts
// that end inside and at the edges of its stretches.
TEST(ScaleTest, HistogramCountsAlikeOnEveryPath) {
  std::vector<float> data;
  uint64_t state = 42;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state >> 32);
  };
  for (int i = 0; i < 6000; ++i) {
    const float m = 1.0f + static_cast<float>(next() % 8388608) / 8388608;
    data.push_back((next() % 2 ? -1 : 1) *
                   std::ldexp(m, -12 + static_cast<int>(next() % 8)));
  }
  for (int i = 0; i < 3000; ++i) data.push_back(std::bit_cast<float>(next()));
  const float odd[] = {0.0f,
                       -0.0f,
                       std::numeric_limits<float>::denorm_min() * 5,
                       std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN(),
                       std::ldexp(1.75f, 3),
                       std::ldexp(1.0f, -126),
                       std::numeric_limits<float>::max()};
  for (size_t k = 0; k < std::size(odd); ++k) data[37 + 611 * k] = odd[k];
  MagnitudeHistogram fast, portable;
  std::span<const float> rest(data);
  for (size_t part : {1, 255, 256, 257, 17, 4096}) {
    fast.Add(rest.first(part));
    portable.Add(rest.first(part), kernels::SimdPath::kPortable);
    rest = rest.subspan(part);
  }
  fast.Add(rest);
  portable.Add(rest, kernels::SimdPath::kPortable);
  EXPECT_EQ(fast.count(), data.size());
  EXPECT_EQ(fast.amax(), std::numeric_limits<float>::max());
  EXPECT_TRUE(fast == portable);
  const QuantStats want = MeasureEachElement(data, Fp8Format::kE4M3, 10);
  const QuantStats got = fast.Measure(Fp8Format::kE4M3, 10);
  EXPECT_EQ(got.saturated, want.saturated);
  EXPECT_EQ(got.flushed, want.flushed);
}

// A small SigLIP `part` on the tiny target.
fb::ModuleT TinySiglip(const std::string& part,
                       const passes::ModelOverrides& o) {
  fb::ModuleT module;
  module.target = std::make_unique<fb::TargetT>();
  EXPECT_TRUE(ir::LoadTarget("tiny", module.target.get()).ok());
  EXPECT_TRUE(passes::BuildModel("siglip-so400m-384", part, o, &module).ok());
  return module;
}

// A small SigLIP MLP block on the tiny target (`layers` of them, rolled
// into a repeat or written out).
fb::ModuleT TinyBlock(int tokens = 8, int width = 32, int mlp = 64,
                      int layers = 1, bool repeat = false) {
  passes::ModelOverrides o;
  o.tokens = tokens;
  o.width = width;
  o.mlp_width = mlp;
  o.heads = 1;
  o.layers = layers;
  o.repeat = repeat;
  return TinySiglip("mlp-block", o);
}

const fb::ValueT* ByName(const fb::ModuleT& m, const std::string& name) {
  for (const auto& v : m.values) {
    if (v->name == name) return v.get();
  }
  return nullptr;
}

const fb::OperationT* OpByName(const fb::ModuleT& m, const std::string& name) {
  for (const auto& op : m.ops) {
    if (op->name == name) return op.get();
  }
  return nullptr;
}

std::vector<const fb::DecisionT*> Decisions(const fb::ModuleT& m) {
  std::vector<const fb::DecisionT*> out;
  for (const auto& d : m.log.back()->decisions) out.push_back(d.get());
  return out;
}

TEST(QuantizeTest, BothGemmsGetFp8OperandsWithRecordedStatistics) {
  fb::ModuleT m = TinyBlock();
  QuantizeFp8Pass pass;
  StatusOr<bool> ran = pass.Run(&m);
  ASSERT_TRUE(ran.ok()) << ran.status().message();
  EXPECT_TRUE(*ran);
  for (const std::string gemm : {"l0.mlp.up", "l0.mlp.down"}) {
    const fb::OperationT* op = OpByName(m, gemm);
    ASSERT_NE(op, nullptr);
    for (uint32_t id : op->operands) {
      const fb::ValueT* v = nullptr;
      for (const auto& value : m.values) {
        if (value->id == id) v = value.get();
      }
      ASSERT_NE(v, nullptr);
      EXPECT_EQ(v->dtype, fb::DType::FP8E4M3) << v->name;
      EXPECT_TRUE(v->fp8_quantized) << v->name;
      EXPECT_EQ(v->unquantized_dtype, fb::DType::F16) << v->name;
      EXPECT_GT(v->fp8_amax, 0) << v->name;
      // The exponent is the one that fits amax (less the margin).
      const int margin = v->role == fb::ValueRole::Weight ? 0 : 1;
      EXPECT_EQ(v->fp8_scale_exp,
                ChooseScaleExp(v->fp8_amax, Fp8Format::kE4M3, margin))
          << v->name;
    }
  }
  // The LayerNorm writes FP8 itself (layernorm_fp8); the GELU has no FP8
  // output kernel, so its cast is a Cast op.
  EXPECT_EQ(ByName(m, "l0.ln2.out")->dtype, fb::DType::FP8E4M3);
  const fb::OperationT* cast = OpByName(m, "l0.mlp.gelu.out.cast");
  ASSERT_NE(cast, nullptr);
  EXPECT_EQ(cast->kind, fb::OpKind::Cast);
  EXPECT_EQ(OpByName(m, "l0.ln2.out.cast"), nullptr);
  bool fused = false, kept = false, accuracy = false;
  for (const fb::DecisionT* d : Decisions(m)) {
    if (d->action.find("fuse into op") != std::string::npos) {
      if (d->outcome == fb::Outcome::Accepted) {
        fused = true;
        EXPECT_NE(d->reason.find("layernorm_fp8"), std::string::npos);
        EXPECT_LT(d->cycles_after, d->cycles_before) << d->reason;
      } else {
        kept = true;
        EXPECT_NE(d->reason.find("no FP8-output kernel"), std::string::npos)
            << d->reason;
      }
    }
    if (d->action.find("accuracy of") == 0) {
      accuracy = true;
      EXPECT_NE(d->reason.find("cosine 0.99"), std::string::npos) << d->reason;
      EXPECT_NE(d->reason.find("branch"), std::string::npos) << d->reason;
    }
  }
  EXPECT_TRUE(fused);
  EXPECT_TRUE(kept);
  EXPECT_TRUE(accuracy);
}

TEST(QuantizeTest, WeightsAreQuantizedCodeForCodeByTheNumericsLibrary) {
  fb::ModuleT m = TinyBlock();
  fb::ModuleT original = TinyBlock();
  QuantizeFp8Pass pass;
  ASSERT_TRUE(pass.Run(&m).ok());
  kernels::ReferenceResult result;
  ASSERT_TRUE(kernels::RunReference(m, &result).ok());
  for (const std::string name : {"l0.mlp.up.w", "l0.mlp.down.w"}) {
    const fb::ValueT* q = ByName(m, name);
    const fb::ValueT* o = ByName(original, name);
    fb::ValueT f32;
    f32.id = o->id;
    f32.shape = o->shape;
    f32.dtype = fb::DType::F32;
    f32.init = std::make_unique<fb::WeightInitT>(*o->init);
    std::vector<float> w;
    ASSERT_TRUE(kernels::MaterializeValue(f32, &w).ok());
    const kernels::ReferenceTensor* t = result.FindByName(name);
    ASSERT_NE(t, nullptr);
    ASSERT_EQ(t->data.size(), w.size());
    const std::string bytes = t->StoredBytes();
    ASSERT_EQ(bytes.size(), w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      ASSERT_EQ(static_cast<uint8_t>(bytes[i]),
                kernels::Fp8Encode(w[i], Fp8Format::kE4M3, q->fp8_scale_exp))
          << name << "[" << i << "]";
      ASSERT_EQ(t->data[i],
                kernels::RoundToFp8(w[i], Fp8Format::kE4M3, q->fp8_scale_exp));
    }
  }
}

TEST(QuantizeTest, UnquantizedRestoresEveryDtype) {
  fb::ModuleT m = TinyBlock();
  fb::ModuleT original = TinyBlock();
  QuantizeFp8Pass pass;
  ASSERT_TRUE(pass.Run(&m).ok());
  std::unique_ptr<fb::ModuleT> u = sim::Unquantized(m);
  kernels::ReferenceResult a, b;
  ASSERT_TRUE(kernels::RunReference(*u, &a).ok());
  ASSERT_TRUE(kernels::RunReference(original, &b).ok());
  for (const kernels::ReferenceTensor* out : b.Outputs()) {
    const kernels::ReferenceTensor* got = a.Find(out->id);
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(got->data, out->data);
  }
}

TEST(QuantizeTest, RunsOnceAndOnlyOnAGraph) {
  fb::ModuleT m = TinyBlock();
  QuantizeFp8Pass pass;
  ASSERT_TRUE(pass.Run(&m).ok());
  Status again = pass.Run(&m).status();
  EXPECT_EQ(again.code(), StatusCode::kBadInput);
  EXPECT_NE(again.message().find("quantized already"), std::string::npos);
}

TEST(QuantizeTest, E5M2Activations) {
  fb::ModuleT m = TinyBlock();
  QuantizeOptions options;
  options.activation_format = fb::DType::FP8E5M2;
  QuantizeFp8Pass pass(options);
  ASSERT_TRUE(pass.Run(&m).ok());
  EXPECT_EQ(ByName(m, "l0.ln2.out")->dtype, fb::DType::FP8E5M2);
  EXPECT_EQ(ByName(m, "l0.mlp.gelu.out.fp8")->dtype, fb::DType::FP8E5M2);
  EXPECT_EQ(ByName(m, "l0.mlp.up.w")->dtype, fb::DType::FP8E4M3);
}

TEST(QuantizeTest, DisabledLeavesTheGraphAlone) {
  fb::ModuleT m = TinyBlock();
  QuantizeOptions options;
  options.enabled = false;
  QuantizeFp8Pass pass(options);
  StatusOr<bool> ran = pass.Run(&m);
  ASSERT_TRUE(ran.ok());
  EXPECT_FALSE(*ran);
  for (const auto& v : m.values) EXPECT_FALSE(v->fp8_quantized) << v->name;
}

TEST(PolicyTest, KeepFixAndExclude) {
  fb::ModuleT m = TinyBlock();
  const fb::OperationT* down = OpByName(m, "l0.mlp.down");
  QuantizeOptions options;
  options.policy_name = "p.policy";
  options.policy_text =
      "# pins\n"
      "value l0.ln2.out: e4m3 exp=3\n"
      "op " + std::to_string(down->id) + ": exclude\n";
  QuantizeFp8Pass pass(options);
  ASSERT_TRUE(pass.Run(&m).ok());
  EXPECT_EQ(ByName(m, "l0.ln2.out")->fp8_scale_exp, 3);
  EXPECT_EQ(ByName(m, "l0.mlp.down.w")->dtype, fb::DType::F16);
  EXPECT_EQ(ByName(m, "l0.mlp.gelu.out")->dtype, fb::DType::F16);
}

TEST(PolicyTest, AValueKeptInF16KeepsItsGemmInF16) {
  fb::ModuleT m = TinyBlock();
  QuantizeOptions options;
  options.policy_name = "p.policy";
  options.policy_text = "value l0.mlp.up.w: f16\n";
  QuantizeFp8Pass pass(options);
  ASSERT_TRUE(pass.Run(&m).ok());
  EXPECT_EQ(ByName(m, "l0.mlp.up.w")->dtype, fb::DType::F16);
  EXPECT_EQ(ByName(m, "l0.ln2.out")->dtype, fb::DType::F16);
  EXPECT_EQ(ByName(m, "l0.mlp.down.w")->dtype, fb::DType::FP8E4M3);
  bool refused = false;
  for (const fb::DecisionT* d : Decisions(m)) {
    if (d->outcome == fb::Outcome::Rejected &&
        d->reason.find("kept in f16 by p.policy:1") != std::string::npos) {
      refused = true;
    }
  }
  EXPECT_TRUE(refused);
}

TEST(PolicyTest, ErrorsNameFileAndLine) {
  fb::ModuleT m = TinyBlock();
  auto error = [&](const std::string& text) {
    StatusOr<Policy> p = ParsePolicy(text, "p.policy", m);
    EXPECT_FALSE(p.ok()) << text;
    return p.ok() ? std::string() : p.status().message();
  };
  EXPECT_EQ(error("\nvalue nope: f16\n"),
            "p.policy:2: no value 'nope' in the module");
  EXPECT_EQ(error("value l0.ln2.out: e3m4\n"),
            "p.policy:1: unknown format 'e3m4' (expected f16, e4m3 or e5m2)");
  EXPECT_EQ(error("value l0.ln2.out: e4m3 exp=x\n"),
            "p.policy:1: expected exp=N with -64 <= N <= 64, got 'exp=x'");
  EXPECT_EQ(error("value l0.ln2.out: f16\nvalue l0.ln2.out: e4m3\n"),
            "p.policy:2: value 'l0.ln2.out' is already given on line 1");
  EXPECT_EQ(error("op 0: exclude\n"),
            "p.policy:1: op 0 is not a GEMM (only MatMuls and attention "
            "GEMMs are quantized)");
  EXPECT_EQ(error("gemm 1: exclude\n"),
            "p.policy:1: unknown keyword 'gemm' (expected value or op)");
  EXPECT_EQ(error("value l0.ln2.out\n"),
            "p.policy:1: expected 'value NAME: RULE' or 'op ID: exclude'");
}

// A SigLIP layer on the tiny target (testdata/quantize-fp8/layer.golden's).
fb::ModuleT TinyLayer(int tokens = 12) {
  passes::ModelOverrides o;
  o.tokens = tokens;
  o.width = 32;
  o.mlp_width = 64;
  o.heads = 4;
  return TinySiglip("layer", o);
}

int OpIndex(const fb::ModuleT& m, uint32_t id) {
  for (size_t i = 0; i < m.ops.size(); ++i) {
    if (m.ops[i]->id == id) return static_cast<int>(i);
  }
  return -1;
}

const fb::OperationT* Producer(const fb::ModuleT& m, uint32_t value) {
  for (const auto& op : m.ops) {
    if (op->results.size() == 1 && op->results[0] == value) return op.get();
  }
  return nullptr;
}

// The last decision whose action starts with `action`.
const fb::DecisionT* LastDecision(const fb::ModuleT& m,
                                  const std::string& action) {
  const fb::DecisionT* found = nullptr;
  for (const fb::DecisionT* d : Decisions(m)) {
    if (d->action.rfind(action, 0) == 0) found = d;
  }
  return found;
}

// Every byte of `m` quantized with `threads`.
std::string QuantizedBytes(fb::ModuleT m, int threads,
                           QuantizeOptions options = {},
                           passes::PassOptions common = {}) {
  options.threads = threads;
  QuantizeFp8Pass pass(options, common);
  StatusOr<bool> ran = pass.Run(&m);
  EXPECT_TRUE(ran.ok()) << ran.status().message();
  std::string bytes;
  EXPECT_TRUE(ir::SerializeModule(std::move(m), "test", &bytes).ok());
  return bytes;
}

// With two threads or more the unquantized graph is planned beside the
// calibration run, and the trial the decisions are expected to make next
// (the current one taken as accepted) is priced beside the current one:
// the output is every byte the one thread's, on graphs whose decisions are
// accepted and rejected, priced by closest plans, bring a graph nearer to
// fitting, are excluded or forced by a policy, or cut short by
// --max-decisions (each a guess gone wrong for the thread pricing ahead).
TEST(QuantizeTest, ThreadsChangeNoByte) {
  struct Case {
    std::string name;
    fb::ModuleT module;
    QuantizeOptions options;
    passes::PassOptions common;
  };
  std::vector<Case> cases;
  cases.push_back({"MLP block", TinyBlock()});
  cases.push_back({"layer", TinyLayer()});
  cases.push_back({"layer of 288 tokens", TinyLayer(288)});
  cases.push_back({"46 rolled blocks",
                   TinyBlock(/*tokens=*/16, /*width=*/64, /*mlp=*/128,
                             /*layers=*/46, /*repeat=*/true)});
  Case policy{"layer with a policy", TinyLayer()};
  policy.options.policy_name = "p.policy";
  policy.options.policy_text =
      "op " + std::to_string(OpByName(policy.module, "l0.attn.qkv")->id) +
      ": exclude\nop " +
      std::to_string(OpByName(policy.module, "l0.attn.ctx")->id) + ": fp8\n";
  cases.push_back(std::move(policy));
  Case limited{"layer with --max-decisions=2", TinyLayer()};
  limited.common.max_decisions = 2;
  cases.push_back(std::move(limited));
  for (const Case& c : cases) {
    const std::string one = QuantizedBytes(*ir::CloneModule(c.module), 1,
                                           c.options, c.common);
    for (int threads : {2, 3}) {
      EXPECT_EQ(QuantizedBytes(*ir::CloneModule(c.module), threads, c.options,
                               c.common),
                one)
          << c.name << ", " << threads << " threads";
    }
  }
}

// `quantized` planned by plan-ownership with `options`: every byte, and
// its messages in `messages`.
std::string PlannedBytes(const fb::ModuleT& quantized,
                         plan::PlannerOptions options, std::string* messages) {
  std::ostringstream os;
  passes::PassOptions common;
  common.messages = &os;
  fb::ModuleT m = quantized;
  plan::PlanOwnershipPass pass(std::move(options), common);
  StatusOr<bool> ran = pass.Run(&m);
  EXPECT_TRUE(ran.ok()) << ran.status().message();
  *messages = os.str();
  std::string bytes;
  EXPECT_TRUE(ir::SerializeModule(std::move(m), "test", &bytes).ok());
  return bytes;
}

// `module` quantized on `threads`, and the initial plan it saves for
// plan-ownership.
std::pair<fb::ModuleT, std::optional<fb::ModuleT>> QuantizedAndItsPlan(
    fb::ModuleT module, int threads = 2) {
  std::optional<fb::ModuleT> saved;
  QuantizeOptions options;
  options.threads = threads;
  options.save_initial_plan = [&saved](const fb::ModuleT& plan) {
    saved = plan;
    return Status::Ok();
  };
  QuantizeFp8Pass pass(options);
  StatusOr<bool> ran = pass.Run(&module);
  EXPECT_TRUE(ran.ok()) << ran.status().message();
  return {std::move(module), std::move(saved)};
}

// The greedy plan quantize-fp8 saves (--save_initial_plan) is the initial
// plan plan-ownership makes of its output: taken (--initial_plan), it gives
// every byte the same output, on graphs that fit as planned, fit only
// after memory repair, and are rolled into a repeat, priced on one thread
// or two.
TEST(QuantizeTest, SavedInitialPlanIsPlanOwnershipsOwn) {
  struct Case {
    std::string name;
    fb::ModuleT module;
    int threads = 2;
  };
  std::vector<Case> cases;
  cases.push_back({"MLP block", TinyBlock()});
  cases.push_back({"MLP block on one thread", TinyBlock(), 1});
  cases.push_back({"layer", TinyLayer()});
  cases.push_back({"layer fitting after memory repair", TinyLayer(224)});
  cases.push_back(
      {"three rolled blocks", TinyBlock(/*tokens=*/8, /*width=*/32, /*mlp=*/64,
                                        /*layers=*/3, /*repeat=*/true)});
  for (Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto [quantized, saved] =
        QuantizedAndItsPlan(std::move(c.module), c.threads);
    ASSERT_TRUE(saved.has_value());
    std::string fresh_messages, taken_messages;
    const std::string fresh = PlannedBytes(quantized, {}, &fresh_messages);
    plan::PlannerOptions taking;
    taking.initial_plan = std::move(saved);
    taking.initial_plan_name = "plan.tilec";
    EXPECT_EQ(PlannedBytes(quantized, taking, &taken_messages), fresh);
    EXPECT_EQ(taken_messages, fresh_messages);
  }
}

// A saved plan made for other parameters or another graph is not taken:
// the initial plan is made again, with a message saying why, and the
// output is that run's.
TEST(QuantizeTest, SavedInitialPlanOfAnotherRunIsNotTaken) {
  auto [block, block_plan] = QuantizedAndItsPlan(TinyBlock());
  ASSERT_TRUE(block_plan.has_value());
  plan::PlannerOptions seeded;
  seeded.seed = 5;
  std::string messages;
  const std::string fresh = PlannedBytes(block, seeded, &messages);
  plan::PlannerOptions taking = seeded;
  taking.initial_plan = block_plan;
  taking.initial_plan_name = "plan.tilec";
  EXPECT_EQ(PlannedBytes(block, taking, &messages), fresh);
  EXPECT_NE(messages.find("--initial_plan plan.tilec not used (it was made "
                          "with other parameters)"),
            std::string::npos)
      << messages;

  const fb::ModuleT layer = QuantizedAndItsPlan(TinyLayer()).first;
  taking = {};
  taking.initial_plan = block_plan;
  taking.initial_plan_name = "plan.tilec";
  std::string other_messages;
  const std::string other = PlannedBytes(layer, taking, &other_messages);
  EXPECT_EQ(other, PlannedBytes(layer, {}, &messages));
  EXPECT_NE(other_messages.find("--initial_plan plan.tilec not used (another "
                                "graph: input "),
            std::string::npos)
      << other_messages;
}

void ExpectSamePrice(const StatusOr<Priced>& a, const StatusOr<Priced>& b) {
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(PricedText(*a), PricedText(*b));
  EXPECT_EQ(a->cycles, b->cycles);
  EXPECT_EQ(a->peak, b->peak);
}

// Each graph and repair flag is planned once, by the first thread to come
// to it; the others take its price (claiming and making a price each count
// in version(), taking one does not).
TEST(TrialPricesTest, EachGraphAndFlagIsPlannedOnce) {
  fb::ModuleT m = TinyBlock();
  StatusOr<plan::Coster> coster = plan::Coster::Create(*m.target, {});
  ASSERT_TRUE(coster.ok());
  TrialPrices prices(*coster);
  using Ahead = TrialPrices::Ahead;
  std::optional<StatusOr<Priced>> ahead;
  EXPECT_EQ(prices.PriceAhead(m, false, /*claim=*/false, &ahead),
            Ahead::kAbsent);
  EXPECT_EQ(prices.version(), 0);
  std::thread([&] {
    EXPECT_EQ(prices.PriceAhead(m, false, /*claim=*/true, &ahead),
              Ahead::kMadeHere);
  }).join();
  EXPECT_EQ(prices.version(), 2);
  ExpectSamePrice(prices.Price(m, false), *ahead);
  ExpectSamePrice(*ahead, PriceByPlanning(m, *coster, false));
  EXPECT_EQ(prices.version(), 2);
  std::optional<StatusOr<Priced>> known;
  EXPECT_EQ(prices.PriceAhead(m, false, /*claim=*/true, &known),
            Ahead::kKnown);
  ExpectSamePrice(*known, *ahead);
  // Another flag, another graph: priced afresh.
  ExpectSamePrice(prices.Price(m, true), PriceByPlanning(m, *coster, true));
  EXPECT_EQ(prices.version(), 4);
  m.values[0]->name += "'";
  EXPECT_EQ(prices.PriceAhead(m, false, /*claim=*/false, &known),
            Ahead::kAbsent);
  // While one thread plans a graph, another finds it pending, or else
  // made; the pass's own thread waits for it.
  std::thread pass([&] { ExpectSamePrice(prices.Price(m, false), *ahead); });
  Ahead seen = Ahead::kAbsent;
  while (seen == Ahead::kAbsent) {
    seen = prices.PriceAhead(m, false, /*claim=*/false, &known);
  }
  EXPECT_TRUE(seen == Ahead::kPending || seen == Ahead::kKnown);
  ExpectSamePrice(prices.Price(m, false), *ahead);
  pass.join();
  EXPECT_EQ(prices.version(), 6);
  EXPECT_FALSE(prices.stopped());
  std::thread waiting([&] { prices.WaitForChange(prices.version()); });
  prices.Stop();
  waiting.join();
  EXPECT_TRUE(prices.stopped());
}

// Repaired trials are claimed ahead while the pass calibrates, not once it
// decides (repair keeps both cores busy); other trials still are, and a
// repaired price made meanwhile is still found.
TEST(TrialPricesTest, NoRepairedTrialIsClaimedAheadOnceThePassDecides) {
  fb::ModuleT early = TinyBlock();
  fb::ModuleT late = TinyBlock();
  late.values[0]->name += "'";
  StatusOr<plan::Coster> coster = plan::Coster::Create(*early.target, {});
  ASSERT_TRUE(coster.ok());
  std::vector<std::pair<const fb::ModuleT*, bool>> planned;
  TrialPrices prices(
      *coster, [&](const fb::ModuleT& m, bool repair) -> StatusOr<Priced> {
        planned.emplace_back(&m, repair);
        return Priced{.feasible = true, .cycles = 1, .peak = 1};
      });
  using Ahead = TrialPrices::Ahead;
  std::optional<StatusOr<Priced>> price;
  EXPECT_EQ(prices.PriceAhead(early, true, /*claim=*/true, &price),
            Ahead::kMadeHere);
  prices.PassDeciding();
  EXPECT_EQ(prices.PriceAhead(late, true, /*claim=*/true, &price),
            Ahead::kAbsent);
  EXPECT_EQ(prices.PriceAhead(late, false, /*claim=*/true, &price),
            Ahead::kMadeHere);
  EXPECT_EQ(prices.PriceAhead(early, true, /*claim=*/true, &price),
            Ahead::kKnown);
  ASSERT_TRUE(prices.Price(late, true).ok());  // the pass prices its own
  EXPECT_EQ(prices.PriceAhead(late, true, /*claim=*/true, &price),
            Ahead::kKnown);
  const std::vector<std::pair<const fb::ModuleT*, bool>> want = {
      {&early, true}, {&late, false}, {&late, true}};
  EXPECT_EQ(planned, want);
}

// A thread that finds its price pending helps while it waits: again while
// help says it priced something and the price is still pending, never
// when it makes the price itself or finds it made.
TEST(TrialPricesTest, AWaitingThreadHelpsWhileThePriceIsPending) {
  fb::ModuleT m = TinyBlock();
  StatusOr<plan::Coster> coster = plan::Coster::Create(*m.target, {});
  ASSERT_TRUE(coster.ok());
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  // Released by the second call to help; a waiting thread that helped
  // only once would otherwise wait for ever.
  TrialPrices prices(
      *coster, [&](const fb::ModuleT&, bool) -> StatusOr<Priced> {
        released.wait_for(std::chrono::seconds(20));
        return Priced{.feasible = true, .cycles = 1234, .peak = 56};
      });
  std::thread maker([&] { EXPECT_EQ(prices.Price(m, false)->cycles, 1234); });
  std::optional<StatusOr<Priced>> seen;
  while (prices.PriceAhead(m, false, /*claim=*/false, &seen) !=
         TrialPrices::Ahead::kPending) {
  }
  int calls = 0;
  const StatusOr<Priced> waited = prices.Price(m, false, [&] {
    // The first call's price is still pending (the maker waits for the
    // second), so there is a second; it says it priced nothing.
    if (++calls == 2) release.set_value();
    return calls == 1;
  });
  maker.join();
  ASSERT_TRUE(waited.ok());
  EXPECT_EQ(waited->cycles, 1234);
  EXPECT_EQ(calls, 2);
  auto never = [] {
    ADD_FAILURE() << "helped without waiting";
    return false;
  };
  EXPECT_EQ(prices.Price(m, false, never)->cycles, 1234);  // made
  EXPECT_EQ(prices.Price(m, true, never)->cycles, 1234);   // made here
}

// No help where it would hold the waiting thread back: a repaired price
// (repair keeps both cores busy), or a price begun more than half as long
// ago as the last plan took.
TEST(TrialPricesTest, AWaitingThreadHelpsOnlyWhereItPays) {
  fb::ModuleT quick = TinyBlock();
  fb::ModuleT slow = TinyBlock();
  slow.values[0]->name += "'";
  StatusOr<plan::Coster> coster = plan::Coster::Create(*quick.target, {});
  ASSERT_TRUE(coster.ok());
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  TrialPrices prices(*coster,
                     [&](const fb::ModuleT& m, bool) -> StatusOr<Priced> {
                       if (&m != &quick)
                         released.wait_for(std::chrono::seconds(20));
                       return Priced{.feasible = true, .cycles = 1, .peak = 1};
                     });
  ASSERT_TRUE(prices.Price(quick, false).ok());  // the last plan: at once
  auto never = [] {
    ADD_FAILURE() << "helped where it does not pay";
    return false;
  };
  std::vector<std::thread> threads;
  for (bool repair : {true, false}) {
    threads.emplace_back(
        [&, repair] { EXPECT_TRUE(prices.Price(slow, repair).ok()); });
    std::optional<StatusOr<Priced>> seen;
    while (prices.PriceAhead(slow, repair, /*claim=*/false, &seen) !=
           TrialPrices::Ahead::kPending) {
    }
  }
  // Begun longer ago than the quick plan took, by far.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (bool repair : {true, false}) {
    threads.emplace_back(
        [&, repair] { EXPECT_TRUE(prices.Price(slow, repair, never).ok()); });
  }
  // A waiter that helped would have done so by now.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  release.set_value();
  for (std::thread& t : threads) t.join();
}

// The planner reads dtypes, not FP8 scales or statistics: a graph priced
// before calibration (the thread pricing ahead) serves the calibrated one.
TEST(TrialPricesTest, ScalesAndStatisticsDoNotChangeAPrice) {
  fb::ModuleT m = TinyLayer();
  ASSERT_TRUE(QuantizeFp8Pass().Run(&m).ok());
  StatusOr<plan::Coster> coster = plan::Coster::Create(*m.target, {});
  ASSERT_TRUE(coster.ok());
  TrialPrices prices(*coster);
  const StatusOr<Priced> price = prices.Price(m, false);
  fb::ModuleT rescaled = *ir::CloneModule(m);
  fb::ValueT* fp8 = nullptr;
  for (auto& v : rescaled.values) {
    if (!v->fp8_quantized) continue;
    v->fp8_scale_exp += 3;
    v->fp8_amax *= 2;
    v->fp8_saturated = 0.5f;
    v->fp8_flushed = 0.25f;
    fp8 = v.get();
  }
  ASSERT_NE(fp8, nullptr);
  ExpectSamePrice(PriceByPlanning(rescaled, *coster, false), price);
  std::optional<StatusOr<Priced>> known;
  EXPECT_EQ(prices.PriceAhead(rescaled, false, /*claim=*/false, &known),
            TrialPrices::Ahead::kKnown);
  fp8->dtype = fb::DType::FP8E5M2;
  EXPECT_EQ(prices.PriceAhead(rescaled, false, /*claim=*/false, &known),
            TrialPrices::Ahead::kAbsent);
}

TEST(QuantizeAttentionTest, EachAttentionGemmIsDecidedByItsPlannedCycles) {
  fb::ModuleT m = TinyLayer();
  QuantizeFp8Pass pass;
  ASSERT_TRUE(pass.Run(&m).ok());
  const fb::OperationT* scores = OpByName(m, "l0.attn.scores");
  const fb::OperationT* ctx = OpByName(m, "l0.attn.ctx");
  for (const fb::OperationT* op : {scores, ctx}) {
    const fb::DecisionT* d = LastDecision(
        m, "run op " + std::to_string(op->id) + " (" + op->name + ")");
    ASSERT_NE(d, nullptr) << op->name;
    EXPECT_GT(d->cycles_before, 0) << d->reason;
    EXPECT_GT(d->cycles_after, 0) << d->reason;
    EXPECT_EQ(d->outcome == fb::Outcome::Accepted,
              d->cycles_after < d->cycles_before)
        << d->reason;
    const fb::DType want = d->outcome == fb::Outcome::Accepted
                               ? fb::DType::FP8E4M3
                               : fb::DType::F16;
    for (uint32_t id : op->operands) {
      const fb::ValueT* v = nullptr;
      for (const auto& value : m.values) {
        if (value->id == id) v = value.get();
      }
      EXPECT_EQ(v->dtype, want) << op->name << " reads " << v->name;
    }
  }
}

// A layer of 224 tokens whose quantized graph fits the tiny target only
// after memory repair: the decisions by cost compare repaired plans, which
// both fit, instead of rejecting every change because neither side fits.
TEST(QuantizeAttentionTest, DecisionsByCostComparePlansAfterMemoryRepair) {
  fb::ModuleT m = TinyLayer(224);
  QuantizeFp8Pass pass;
  StatusOr<bool> ran = pass.Run(&m);
  ASSERT_TRUE(ran.ok()) << ran.status().message();
  const fb::DecisionT* repair =
      LastDecision(m, "price the decisions by cost after memory repair");
  ASSERT_NE(repair, nullptr);
  EXPECT_NE(repair->reason.find("does not fit"), std::string::npos);
  const fb::DecisionT* ln1 = LastDecision(m, "cast %3 l0.ln1.out");
  ASSERT_NE(ln1, nullptr);
  EXPECT_EQ(ln1->outcome, fb::Outcome::Accepted) << ln1->reason;
  EXPECT_GT(ln1->cycles_before, ln1->cycles_after) << ln1->reason;
  EXPECT_NE(ln1->reason.find("after memory repair"), std::string::npos);
  for (const std::string name : {"l0.attn.scores", "l0.attn.ctx"}) {
    const fb::OperationT* op = OpByName(m, name);
    const fb::DecisionT* d = LastDecision(
        m, "run op " + std::to_string(op->id) + " (" + name + ")");
    ASSERT_NE(d, nullptr) << name;
    EXPECT_GT(d->cycles_before, 0) << d->reason;
    EXPECT_GT(d->cycles_after, 0) << d->reason;
  }
  StatusOr<bool> planned = plan::PlanOwnershipPass().Run(&m);
  EXPECT_TRUE(planned.ok()) << planned.status().message();
}

// At 288 tokens not even memory repair fits the quantized layer: one
// repaired plan says so, and the decisions by cost compare closest plans
// instead of repairing every trial.
TEST(QuantizeAttentionTest, WhereRepairCannotFitTrialsAreNotRepaired) {
  fb::ModuleT m = TinyLayer(288);
  QuantizeFp8Pass pass;
  StatusOr<bool> ran = pass.Run(&m);
  ASSERT_TRUE(ran.ok()) << ran.status().message();
  EXPECT_EQ(LastDecision(m, "price the decisions by cost after memory repair"),
            nullptr);
  const fb::DecisionT* closest =
      LastDecision(m, "price the decisions by cost by their closest plans");
  ASSERT_NE(closest, nullptr);
  EXPECT_NE(closest->reason.find("repaired: does not fit"), std::string::npos)
      << closest->reason;
  for (const fb::DecisionT* d : Decisions(m)) {
    EXPECT_EQ(d->reason.find("after memory repair"), std::string::npos)
        << d->action << ": " << d->reason;
  }
}

// Where no plan fits either way, a forced attention GEMM still runs FP8.
TEST(QuantizeAttentionTest, ForcedWhereNothingFits) {
  fb::ModuleT m = TinyLayer(288);
  const uint32_t ctx = OpByName(m, "l0.attn.ctx")->id;
  QuantizeOptions options;
  options.policy_name = "p.policy";
  options.policy_text = "op " + std::to_string(ctx) + ": fp8\n";
  QuantizeFp8Pass pass(options);
  ASSERT_TRUE(pass.Run(&m).ok());
  const std::string action =
      "run op " + std::to_string(ctx) + " (l0.attn.ctx) on FP8 operands";
  const fb::DecisionT* d = LastDecision(m, action);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->outcome, fb::Outcome::Accepted) << d->reason;
  EXPECT_EQ(ByName(m, "l0.attn.softmax.out")->dtype, fb::DType::FP8E4M3);
}

TEST(QuantizeAttentionTest, ContextReadsSoftmaxFp8AndSharesTheQkvCast) {
  fb::ModuleT m = TinyLayer();
  fb::ModuleT original = TinyLayer();
  const fb::OperationT* ctx = OpByName(m, "l0.attn.ctx");
  QuantizeOptions options;
  options.policy_name = "p.policy";
  options.policy_text = "op " + std::to_string(ctx->id) + ": fp8\n";
  QuantizeFp8Pass pass(options);
  ASSERT_TRUE(pass.Run(&m).ok());
  ctx = OpByName(m, "l0.attn.ctx");
  const fb::OperationT* scores = OpByName(m, "l0.attn.scores");
  // The softmax stores the probabilities in FP8 (softmax_fp8), scaled to
  // their bound 1: no Cast op.
  const fb::ValueT* probs = ByName(m, "l0.attn.softmax.out");
  EXPECT_EQ(ctx->operands[0], probs->id);
  EXPECT_EQ(probs->dtype, fb::DType::FP8E4M3);
  EXPECT_EQ(probs->fp8_scale_exp,
            ChooseScaleExp(1.0f, Fp8Format::kE4M3, 0));
  EXPECT_EQ(OpByName(m, "l0.attn.softmax.out.cast"), nullptr);
  // v comes from one FP8 cast of qkv, which the scores read too, placed
  // before them.
  const fb::ValueT* qkv = ByName(m, "l0.attn.qkv_bias.out.fp8");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(ctx->operands[1], qkv->id);
  EXPECT_EQ(scores->operands[0], qkv->id);
  const fb::OperationT* cast = Producer(m, qkv->id);
  ASSERT_NE(cast, nullptr);
  EXPECT_EQ(cast->kind, fb::OpKind::Cast);
  EXPECT_LT(OpIndex(m, cast->id), OpIndex(m, scores->id));
  const fb::DecisionT* d =
      LastDecision(m, "run op " + std::to_string(ctx->id) + " (l0.attn.ctx)");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->outcome, fb::Outcome::Accepted);
  EXPECT_NE(d->reason.find("softmax_fp8"), std::string::npos) << d->reason;
  EXPECT_NE(d->reason.find("planned: F16 "), std::string::npos) << d->reason;
  // The reference runs it, and Unquantized() gives the original back.
  kernels::ReferenceResult q, u, o;
  ASSERT_TRUE(kernels::RunReference(m, &q).ok());
  ASSERT_TRUE(kernels::RunReference(*sim::Unquantized(m), &u).ok());
  ASSERT_TRUE(kernels::RunReference(original, &o).ok());
  for (const kernels::ReferenceTensor* out : o.Outputs()) {
    EXPECT_EQ(u.Find(out->id)->data, out->data);
  }
  for (const sim::OutputAccuracy& a : sim::CompareOutputs(m, q, o)) {
    EXPECT_TRUE(sim::WithinUnquantizedTolerance(a, {}))
        << sim::AccuracyText(a.full);
  }
}

TEST(QuantizeAttentionTest, PolicyExcludesOrForcesOnlyGemms) {
  fb::ModuleT m = TinyLayer();
  const std::string scores = std::to_string(OpByName(m, "l0.attn.scores")->id);
  const fb::OperationT* qkv = OpByName(m, "l0.attn.qkv");
  StatusOr<Policy> bad = ParsePolicy(
      "op " + std::to_string(qkv->id) + ": fp8\n", "p.policy", m);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("is a MatMul"), std::string::npos);
  QuantizeOptions options;
  options.policy_name = "p.policy";
  options.policy_text = "op " + scores + ": exclude\n";
  QuantizeFp8Pass pass(options);
  ASSERT_TRUE(pass.Run(&m).ok());
  const fb::DecisionT* d =
      LastDecision(m, "run op " + scores + " (l0.attn.scores)");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->outcome, fb::Outcome::Rejected);
  EXPECT_NE(d->reason.find("excluded by p.policy"), std::string::npos);
  EXPECT_EQ(ByName(m, "l0.attn.qkv_bias.out")->dtype, fb::DType::F16);
}

class CalibrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/calibration";
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  // `shape` empty: the input's own.
  Status RunWith(const std::vector<float>& x,
                 std::vector<int64_t> shape = {}) {
    fb::ModuleT m = TinyBlock();
    const fb::ValueT* in = nullptr;
    for (const auto& v : m.values) {
      if (v->role == fb::ValueRole::Input) in = v.get();
    }
    if (shape.empty()) shape = in->shape;
    EXPECT_TRUE(
        kernels::WriteNpyF32(dir_ + "/" + in->name + ".npy", shape, x).ok());
    QuantizeOptions options;
    options.calibration_dir = dir_;
    QuantizeFp8Pass pass(options);
    return pass.Run(&m).status();
  }
  std::string dir_;
};

TEST_F(CalibrationTest, CalibratesOnTheGivenInput) {
  std::vector<float> x(8 * 32);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.1f * i) * 3;
  Status s = RunWith(x);
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST_F(CalibrationTest, NonFiniteOrAllZeroInputIsBadInput) {
  std::vector<float> x(8 * 32, 1.0f);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  Status s = RunWith(x);
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
  EXPECT_NE(s.message().find("x.npy: element 5 of %"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("is NaN"), std::string::npos) << s.message();
  s = RunWith(std::vector<float>(8 * 32, 0.0f));
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
  EXPECT_NE(s.message().find("is zero"), std::string::npos) << s.message();
  s = RunWith(std::vector<float>(3, 1.0f), {3});
  EXPECT_EQ(s.code(), StatusCode::kBadInput) << s.message();
  EXPECT_NE(s.message().find("x.npy"), std::string::npos) << s.message();
}

// ---------------------------------------------------------------- repeats

// Three MLP blocks on the tiny target, rolled into a repeat or written out.
fb::ModuleT TinyBlocks(bool repeat) { return TinyBlock(8, 32, 64, 3, repeat); }

// Two bits less headroom than the range needs: the largest activations
// saturate, so the fractions are worth comparing.
constexpr int kTightMargin = -2;

fb::ModuleT Quantized(fb::ModuleT m, int margin = kTightMargin) {
  QuantizeOptions options;
  options.place_by_cost = false;
  options.activation_margin = margin;
  QuantizeFp8Pass pass(options);
  StatusOr<bool> ran = pass.Run(&m);
  EXPECT_TRUE(ran.ok()) << ran.status().message();
  return m;
}

class RolledQuantizeTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    original_ = new fb::ModuleT(TinyBlocks(true));
    rolled_ = new fb::ModuleT(Quantized(TinyBlocks(true)));
    written_ = new fb::ModuleT(Quantized(TinyBlocks(false)));
  }
  static void TearDownTestSuite() {
    delete original_;
    delete rolled_;
    delete written_;
  }
  static fb::ModuleT* original_;
  static fb::ModuleT* rolled_;
  static fb::ModuleT* written_;
};
fb::ModuleT* RolledQuantizeTest::original_ = nullptr;
fb::ModuleT* RolledQuantizeTest::rolled_ = nullptr;
fb::ModuleT* RolledQuantizeTest::written_ = nullptr;

// Every weight, body weight or twin, has the scale and statistics of its
// own contents: those the written-out graph gives the same weight.
TEST_F(RolledQuantizeTest, TwinsAreQuantizedWithTheirOwnScales) {
  ASSERT_TRUE(ir::VerifyRepeats(*rolled_).ok());
  const fb::RepeatT& r = *rolled_->repeats[0];
  int twins = 0;
  for (const auto& v : rolled_->values) {
    if (v->role != fb::ValueRole::Weight || v->shape.size() != 2) continue;
    const fb::ValueT* w = ByName(*written_, v->name);
    ASSERT_NE(w, nullptr) << v->name;
    EXPECT_TRUE(v->fp8_quantized) << v->name;
    EXPECT_EQ(v->dtype, w->dtype) << v->name;
    EXPECT_EQ(v->fp8_scale_exp, w->fp8_scale_exp) << v->name;
    EXPECT_EQ(v->fp8_amax, w->fp8_amax) << v->name;
    EXPECT_EQ(v->fp8_saturated, w->fp8_saturated) << v->name;
    EXPECT_EQ(v->fp8_flushed, w->fp8_flushed) << v->name;
    uint32_t body = 0;
    if (ir::TwinOf(*rolled_, v->id, &body) != nullptr) ++twins;
  }
  EXPECT_EQ(twins, 2 * (static_cast<int>(r.count) - 1));
  // Not every layer's weight has the same amax: the scales are their own.
  EXPECT_NE(ByName(*rolled_, "l0.mlp.up.w")->fp8_amax,
            ByName(*rolled_, "l1.mlp.up.w")->fp8_amax);
}

// A body activation has one scale: the largest magnitude over every
// iteration, i.e. over the written-out graph's layers.
TEST_F(RolledQuantizeTest, BodyActivationScaleIsTheMaxOverIterations) {
  // The FP8 value is the cast's or, fused, the producer's own.
  auto fp8 = [](const fb::ModuleT& m, const std::string& name) {
    const fb::ValueT* v = ByName(m, name + ".fp8");
    return v != nullptr ? v : ByName(m, name);
  };
  kernels::ReferenceResult layers;
  ASSERT_TRUE(kernels::RunReference(TinyBlocks(false), &layers).ok());
  bool saturated = false;
  for (const std::string name : {"ln2.out", "mlp.gelu.out"}) {
    const fb::ValueT* rolled = fp8(*rolled_, "l0." + name);
    ASSERT_NE(rolled, nullptr) << name;
    EXPECT_TRUE(rolled->fp8_quantized) << name;
    float amax = 0;
    for (int layer = 0; layer < 3; ++layer) {
      const fb::ValueT* w =
          fp8(*written_, "l" + std::to_string(layer) + "." + name);
      ASSERT_NE(w, nullptr) << name << " layer " << layer;
      amax = std::max(amax, w->fp8_amax);
    }
    EXPECT_EQ(rolled->fp8_amax, amax) << name;
    EXPECT_EQ(rolled->fp8_scale_exp,
              ChooseScaleExp(amax, Fp8Format::kE4M3, kTightMargin))
        << name;
    // The fractions are those of every layer's data at the shared scale.
    std::vector<float> all;
    for (int layer = 0; layer < 3; ++layer) {
      const auto& data =
          layers.FindByName("l" + std::to_string(layer) + "." + name)->data;
      all.insert(all.end(), data.begin(), data.end());
    }
    const QuantStats want =
        Measure(all, Fp8Format::kE4M3, rolled->fp8_scale_exp);
    EXPECT_EQ(rolled->fp8_saturated, static_cast<float>(want.saturated));
    EXPECT_EQ(rolled->fp8_flushed, static_cast<float>(want.flushed));
    saturated = saturated || want.saturated > 0;
  }
  EXPECT_TRUE(saturated) << "nothing saturated: the fractions go untested";
}

// One decision per body GEMM (not per layer), each followed by one line
// for its twins; the output has no residual branch (the last iteration's
// residual is the previous iteration's result, not the graph input).
TEST_F(RolledQuantizeTest, OneDecisionPerBodyGemm) {
  int gemms = 0, twin_lines = 0;
  for (const fb::DecisionT* d : Decisions(*rolled_)) {
    if (d->action.find("operands to FP8") != std::string::npos) {
      ++gemms;
      EXPECT_EQ(d->outcome, fb::Outcome::Accepted) << d->reason;
      EXPECT_NE(d->reason.find("calibrated over 3 iterations"),
                std::string::npos)
          << d->reason;
    }
    if (d->action.find("twins of") != std::string::npos) {
      ++twin_lines;
      EXPECT_NE(d->action.find("2 twins"), std::string::npos) << d->action;
    }
    if (d->action.find("accuracy of") == 0) {
      EXPECT_EQ(d->reason.find("branch"), std::string::npos) << d->reason;
    }
  }
  EXPECT_EQ(gemms, 2);
  EXPECT_EQ(twin_lines, 2);
}

// The unquantized graph rebuilt from the quantized one restores the twins
// and computes exactly what the graph computed before quantize-fp8.
TEST_F(RolledQuantizeTest, UnquantizedRestoresTwins) {
  std::unique_ptr<fb::ModuleT> u = sim::Unquantized(*rolled_);
  ASSERT_TRUE(ir::VerifyRepeats(*u).ok());
  for (uint32_t twin : u->repeats[0]->iteration_weights) {
    for (const auto& v : u->values) {
      if (v->id == twin) {
        EXPECT_EQ(v->dtype, fb::DType::F16) << v->name;
      }
    }
  }
  kernels::ReferenceResult before, after;
  ASSERT_TRUE(kernels::RunReference(*original_, &before).ok());
  ASSERT_TRUE(kernels::RunReference(*u, &after).ok());
  const auto& want = before.Outputs()[0]->data;
  const auto& got = after.Outputs()[0]->data;
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << i;
}

// A rule on a body weight rules its twins (they share its dtype), each
// still scaled from its own contents; a rule naming a twin is an error.
TEST_F(RolledQuantizeTest, PolicyOnBodyWeightRulesItsTwins) {
  fb::ModuleT m = TinyBlocks(true);
  QuantizeOptions options;
  options.place_by_cost = false;
  options.policy_name = "p.policy";
  options.policy_text = "value l0.mlp.up.w: e5m2\n";
  QuantizeFp8Pass pass(options);
  StatusOr<bool> ran = pass.Run(&m);
  ASSERT_TRUE(ran.ok()) << ran.status().message();
  ASSERT_TRUE(ir::VerifyRepeats(m).ok());
  for (int layer = 0; layer < 3; ++layer) {
    const fb::ValueT* w = ByName(m, "l" + std::to_string(layer) + ".mlp.up.w");
    EXPECT_EQ(w->dtype, fb::DType::FP8E5M2) << w->name;
    EXPECT_EQ(w->fp8_scale_exp,
              ChooseScaleExp(w->fp8_amax, Fp8Format::kE5M2, 0))
        << w->name;
  }
  StatusOr<Policy> twin =
      ParsePolicy("value l1.mlp.up.w: f16\n", "p.policy", m);
  ASSERT_FALSE(twin.ok());
  EXPECT_EQ(twin.status().message(),
            "p.policy:1: value 'l1.mlp.up.w' is a later iteration's copy of "
            "weight %4 of a repeat: name that weight, whose rule rules every "
            "iteration");
}

// With the default margin the quantized rolled graph is close to the F16
// one.
TEST_F(RolledQuantizeTest, QuantizedRolledGraphIsAccurate) {
  const fb::ModuleT quantized = Quantized(TinyBlocks(true), /*margin=*/1);
  kernels::ReferenceResult q, f16;
  ASSERT_TRUE(kernels::RunReference(quantized, &q).ok());
  ASSERT_TRUE(kernels::RunReference(*original_, &f16).ok());
  const std::vector<sim::OutputAccuracy> a =
      sim::CompareOutputs(quantized, q, f16);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_GT(a[0].full.cosine, 0.99);
  EXPECT_FALSE(a[0].has_branch);
}

// Nearer to fitting is memory repair's order: less excess first, then a
// lower peak; only while neither plan fits.
TEST(QuantizeSupportTest, NearerToFittingByExcessThenPeak) {
  const Priced before{.feasible = false, .peak = 700, .excess = 300};
  EXPECT_TRUE(NearerToFitting({.feasible = false, .peak = 800, .excess = 200},
                              before));
  EXPECT_TRUE(NearerToFitting({.feasible = false, .peak = 650, .excess = 300},
                              before));
  EXPECT_FALSE(NearerToFitting({.feasible = false, .peak = 600, .excess = 400},
                               before));
  EXPECT_FALSE(NearerToFitting({.feasible = true, .peak = 500}, before));
  EXPECT_EQ(NearerText({.feasible = false, .peak = 650, .excess = 1200},
                       before),
            "the closest plan from 300 B over capacity summed over its steps "
            "(peak 700 B per tile) to 1,200 B over capacity summed over its "
            "steps (peak 650 B per tile)");
}

// Forty-six rolled blocks whose F16 weights cannot fit the tiny target while
// their FP8 weights can: quantize-fp8 takes each GEMM that brings the
// closest plan nearer to fitting, and the result plans.
TEST(QuantizeRepeatTest, QuantizesWhatOnlyFitsInFp8) {
  fb::ModuleT m = TinyBlock(/*tokens=*/16, /*width=*/64, /*mlp=*/128,
                            /*layers=*/46, /*repeat=*/true);
  QuantizeFp8Pass pass;
  StatusOr<bool> ran = pass.Run(&m);
  ASSERT_TRUE(ran.ok()) << ran.status().message();
  int nearer = 0;
  for (const fb::DecisionT* d : Decisions(m)) {
    if (d->outcome == fb::Outcome::Accepted &&
        d->reason.find("neither fits yet") != std::string::npos) {
      ++nearer;
      EXPECT_NE(d->reason.find("B over capacity summed over its steps"),
                std::string::npos)
          << d->reason;
    }
  }
  EXPECT_GE(nearer, 1);
  for (const std::string gemm : {"l0.mlp.up", "l0.mlp.down"}) {
    const fb::OperationT* op = OpByName(m, gemm);
    ASSERT_NE(op, nullptr);
    EXPECT_TRUE(ByName(m, gemm + ".w")->fp8_quantized) << gemm;
  }
  StatusOr<bool> planned = plan::PlanOwnershipPass().Run(&m);
  EXPECT_TRUE(planned.ok()) << planned.status().message();
}

}  // namespace
}  // namespace tilec::quantize
