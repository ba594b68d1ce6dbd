// The whole pipeline (passes/pipeline/PIPELINE) on the tiny target with the
// real planner, then the simulator against the reference, on several models and shapes
// (uneven splits included) and with recipes pinned to exercise every
// staging. Outputs must pass the simulator's default tolerance
// (docs/device-program.md: K-split partials are summed after the fact) and,
// where no GEMM splits K, agree exactly.

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>

#include "formats/ir.h"
#include "passes/quantize/quantize.h"
#include "passes/lower/hand_plan.h"
#include "passes/pipeline/pipeline.h"
#include "passes/plan/planner.h"
#include "passes/plan/test_modules.h"

namespace tilec::lower {
namespace {

// The default pipeline, with FP8 GEMMs (quantize-fp8) or every dtype kept.
Status RunDefaultPipeline(fb::ModuleT* m, bool fp8) {
  return passes::RunPipeline(
      m, [&](std::string_view name) -> std::unique_ptr<passes::Pass> {
        if (name == "quantize-fp8" && !fp8) return quantize::KeepDTypesPass();
        return nullptr;
      });
}

// How many calls of `kernel` the device program makes.
int KernelCalls(const fb::ModuleT& m, std::string_view kernel) {
  int calls = 0;
  for (const auto& step : m.program->supersteps) {
    for (const auto& c : step->compute) calls += c->kernel == kernel;
  }
  return calls;
}

// " name(N steps)" for each op with a body step `is`, for the log.
template <typename StepIs>
std::string OpsWithStep(const fb::ModuleT& m, StepIs is) {
  std::string ops;
  for (const auto& op : m.ops) {
    for (const auto& step : op->body) {
      if (is(*step)) {
        ops += " " + op->name + "(" + std::to_string(op->body.size()) +
               " steps)";
      }
    }
  }
  return ops;
}

// Simulates a compiled elementwise test layer against its reference at
// the default tolerance of its pipeline; the simulated cycles must be the
// program's prediction. Logs `label`'s figures and `detail`.
void ExpectSimulatesAsPredicted(const fb::ModuleT& m, bool fp8,
                                const char* label, const std::string& detail) {
  const testing::ProgramFigures summary = testing::ProgramFiguresOf(m);
  testing::SimCheck check;
  Status s = testing::SimulateAgainstReference(
      m,
      fp8 ? sim::Tolerance{0.1, 0.1, 0.99}
          : sim::Tolerance{2e-2, 1e-2, 0.9999},
      &check);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(check.pass) << (fp8 ? "fp8: " : "f16: ") << check.message;
  EXPECT_EQ(check.result.total_cycles, summary.predicted);
  std::printf("%s %s: simulated %lld cycles, planner %lld, max_abs_err %g, %s\n",
              label, fp8 ? "fp8" : "f16",
              static_cast<long long>(check.result.total_cycles),
              static_cast<long long>(summary.planned), check.max_abs_err,
              detail.c_str());
}

struct Case {
  const char* name;
  const char* preset;
  int64_t tokens, width, mlp, heads;
  const char* recipe;  // pinned recipes ("" none)
};

// K-split partials are summed in another order than the reference's, so
// such a program is compared within tolerances rather than exactly.
bool HasKSplitGemm(const fb::ModuleT& m) {
  for (const auto& op : m.ops) {
    if (op->recipe && op->recipe->kind == fb::RecipeKind::Gemm &&
        op->recipe->k_split > 1) {
      return true;
    }
  }
  return false;
}

class PipelineTest : public ::testing::TestWithParam<Case> {};

TEST_P(PipelineTest, SimulatesLikeTheReference) {
  const Case& c = GetParam();
  fb::ModuleT m = testing::Import(c.preset, "mlp-block", "tiny", c.tokens,
                                  c.width, c.mlp, c.heads);
  plan::PlannerOptions po;
  po.attempts = 16;
  po.recipe_text = c.recipe;
  if (*c.recipe) po.recipe_name = std::string(c.name) + ".recipe";
  Status s = passes::RunPipeline(
      &m, [&](std::string_view name) -> std::unique_ptr<passes::Pass> {
        // Pinned recipes are written for the graph's own dtypes (chunk_k=16
        // is F16's K granule): those cases run the F16 pipeline.
        if (name == "quantize-fp8" && *c.recipe) {
          return quantize::KeepDTypesPass();
        }
        if (name != "plan-ownership") return nullptr;
        return std::make_unique<plan::PlanOwnershipPass>(po);
      });
  ASSERT_TRUE(s.ok()) << s.message();
  const testing::ProgramFigures summary = testing::ProgramFiguresOf(m);
  const bool k_split = HasKSplitGemm(m);
  testing::SimCheck check;
  s = testing::SimulateAgainstReference(
      m, k_split ? sim::Tolerance{2e-2, 1e-2, 0.9999} : sim::Tolerance{0, 0, 0.999999},
      &check);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(check.pass) << check.message;
  if (!k_split) {
    EXPECT_EQ(check.max_abs_err, 0);
  }
  EXPECT_EQ(check.result.total_cycles, summary.predicted);
  std::printf("%s: simulated %lld cycles, planner %lld, max_abs_err %g%s\n",
              c.name, static_cast<long long>(check.result.total_cycles),
              static_cast<long long>(summary.planned), check.max_abs_err,
              k_split ? " (K split)" : "");
}

INSTANTIATE_TEST_SUITE_P(
    Tiny, PipelineTest,
    ::testing::Values(
        // The planner's own choices.
        Case{"vit_small", "vit-b16-224", 10, 48, 96, 3, ""},
        Case{"vit_medium", "vit-b16-224", 64, 96, 384, 3, ""},
        Case{"clip_quick_gelu", "clip-vit-l14-224", 20, 64, 128, 4, ""},
        Case{"siglip_uneven", "siglip-so400m-384", 13, 36, 100, 4, ""},
        // Pinned: K splits with Streamed and Batched staging, a flat GELU.
        Case{"forced_staging", "vit-b16-224", 10, 48, 96, 3,
             "op 1: gemm m=2 k=3 n=2 staging=streamed chunk_k=16\n"
             "op 2: elementwise blocked(10x1)\n"
             "op 3: elementwise flat(grain=4, tiles=16)\n"
             "op 4: gemm m=2 k=2 n=3 staging=batched(2) chunk_k=16\n"},
        // Pinned: uneven everything, a K split whose result ranges straddle
        // GEMM column blocks.
        Case{"uneven_ranges", "siglip-so400m-384", 13, 40, 72, 4,
             "op 1: gemm m=3 k=2 n=2 staging=complete\n"
             "op 4: gemm m=2 k=2 n=3 staging=streamed chunk_k=16\n"},
        // Pinned: no K split anywhere, streamed: exact.
        Case{"exact_streamed", "siglip-so400m-384", 12, 32, 64, 4,
             "op 1: gemm m=2 k=1 n=4 staging=streamed chunk_k=16\n"
             "op 4: gemm m=4 k=1 n=2 staging=batched(2) chunk_k=16\n"},
        // Pinned: serial row steps with K splits, more steps than some
        // blocks have rows (empty steps), and staged chunks.
        Case{"serial_steps", "siglip-so400m-384", 13, 40, 72, 4,
             "op 1: gemm m=3 k=2 n=2 staging=complete steps=2\n"
             "op 4: gemm m=2 k=2 n=3 staging=streamed chunk_k=16 steps=5\n"},
        // Pinned: interleaved row steps, with runs of uneven and of no
        // rows (k3 parts of 3, 2 and 2 rows in 2 steps; 5 steps of parts
        // of 4 and 3 rows) and staged chunks.
        Case{"interleaved_steps", "siglip-so400m-384", 13, 40, 72, 4,
             "op 1: gemm m=2 k=3 n=2 staging=complete steps=interleaved(2)\n"
             "op 4: gemm m=2 k=2 n=3 staging=streamed chunk_k=16 "
             "steps=interleaved(5)\n"},
        // Pinned: serial row steps without K splits: exact.
        Case{"exact_serial_steps", "siglip-so400m-384", 12, 32, 64, 4,
             "op 1: gemm m=2 k=1 n=4 staging=streamed chunk_k=16 steps=2\n"
             "op 4: gemm m=2 k=1 n=2 staging=complete steps=4\n"}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// An F16 MLP block of 480 tokens on tiny fits only when the down
// projection runs its rows in serial steps: memory repair chooses them (a
// Decision), each step reuses one set of scratch buffers, and the program
// simulates like the reference, as predicted. At 768 tokens only
// interleaved steps fit (every reducer's remote partials shrink by the
// step count); at 1024 even the steps leave it short: plan-ownership
// refuses with the closest plan's tile.
fb::ModuleT TinyMlpBlock(int64_t tokens) {
  return testing::Import("siglip-so400m-384", "mlp-block", "tiny", tokens, 64,
                         256, 4);
}

// The grid of a GEMM recipe's text, "m=2 k=1 n=8" of "gemm m=2 k=1 n=8
// staging=complete".
std::string GridOf(std::string_view recipe) {
  const size_t at = recipe.find("m=");
  const size_t end = recipe.find(" staging=");
  if (at == std::string_view::npos || end == std::string_view::npos) return "";
  return std::string(recipe.substr(at, end - at));
}

// Compiles `m` and checks that memory repair chose steps whose recipe text
// contains `steps` for a GEMM (if `regrid`, with another grid in the same
// decision), and that the program matches the reference as predicted. The
// compiled module goes to `compiled` if given.
void ExpectRepairChoosesSteps(fb::ModuleT m, std::string_view steps,
                              bool regrid = false,
                              fb::ModuleT* compiled = nullptr) {
  Status s = RunDefaultPipeline(&m, /*fp8=*/false);
  ASSERT_TRUE(s.ok()) << s.message();
  const fb::OperationT* stepped = nullptr;
  for (const auto& op : m.ops) {
    if (op->recipe && op->recipe->k_split > 1 && op->recipe->steps > 1) {
      stepped = op.get();
    }
  }
  ASSERT_NE(stepped, nullptr) << "no K-split GEMM runs in serial steps";
  bool decided = false;
  for (const auto& run : m.log) {
    for (const auto& d : run->decisions) {
      const size_t arrow = d->action.find(" -> ");
      if (d->outcome != fb::Outcome::Accepted ||
          d->reason.find("memory repair") == std::string::npos ||
          arrow == std::string::npos ||
          d->action.find(steps, arrow) == std::string::npos) {
        continue;
      }
      const std::string before = GridOf(d->action.substr(0, arrow));
      const std::string after = GridOf(d->action.substr(arrow));
      decided |= !regrid || (!before.empty() && before != after);
    }
  }
  EXPECT_TRUE(decided) << "no memory repair decision chose " << steps;
  // One partials buffer per grid tile, not one per step.
  std::map<uint32_t, int> partials_per_tile;
  for (const auto& b : m.program->buffers) {
    if (b->op == stepped->id && b->name == stepped->name + ".partials") {
      ++partials_per_tile[b->tile];
    }
  }
  EXPECT_EQ(partials_per_tile.size(),
            static_cast<size_t>(stepped->recipe->m_split *
                                stepped->recipe->k_split *
                                stepped->recipe->n_split));
  for (const auto& [tile, n] : partials_per_tile) EXPECT_EQ(n, 1) << tile;
  testing::SimCheck check;
  s = testing::SimulateAgainstReference(m, sim::Tolerance{2e-2, 1e-2, 0.9999},
                                        &check);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(check.pass) << check.message;
  EXPECT_EQ(check.result.total_cycles,
            testing::ProgramFiguresOf(m).predicted);
  if (compiled) *compiled = std::move(m);
}

TEST(PipelineSerialStepsTest, MemoryRepairChoosesInterleavedSteps) {
  ExpectRepairChoosesSteps(TinyMlpBlock(768), " steps=interleaved(");
}

// Repair takes contiguous steps first and stops once the plan fits: at 480
// tokens the down projection in 2 contiguous steps. Its 2 interleaved
// steps fit too and are faster (each step's partials spread over every
// reducer): the planner then takes them, a Decision with cycles both ways,
// and the program matches the reference as predicted.
TEST(PipelineSerialStepsTest, MemoryRepairChoosesStepsThenTheFastestThatFit) {
  fb::ModuleT m;
  ExpectRepairChoosesSteps(TinyMlpBlock(480), " steps=2", false, &m);
  int relaxed = 0;
  for (const auto& run : m.log) {
    for (const auto& d : run->decisions) {
      if (d->reason.find("fewer or other serial steps") == std::string::npos) {
        continue;
      }
      ++relaxed;
      EXPECT_EQ(d->outcome, fb::Outcome::Accepted);
      EXPECT_LT(d->cycles_after, d->cycles_before);
      EXPECT_NE(d->action.find("steps=2 -> "), std::string::npos) << d->action;
      EXPECT_NE(d->action.find("-> gemm m=4 k=4 n=1 staging=complete "
                               "steps=interleaved(2)"),
                std::string::npos)
          << d->action;
    }
  }
  EXPECT_EQ(relaxed, 1);
}

// A wider block (width 128, MLP 512) of 240 tokens fits only if repair
// moves the down projection (then m=2 k=2 n=4, streamed) to another grid in
// interleaved steps (m=1 k=8 n=2, interleaved(4)) in one decision:
// unstepped, that grid needs more memory than the incumbent, so no single
// move reaches the pair. Without such moves plan-ownership exits 3.
TEST(PipelineSerialStepsTest, MemoryRepairChangesGridAndStepsAtOnce) {
  ExpectRepairChoosesSteps(
      testing::Import("siglip-so400m-384", "mlp-block", "tiny", 240, 128,
                      512, 4),
      " steps=interleaved(", /*regrid=*/true);
}

TEST(PipelineSerialStepsTest, TooLargeEvenInStepsExitsWithTheTile) {
  fb::ModuleT m = TinyMlpBlock(1024);
  const Status s = RunDefaultPipeline(&m, /*fp8=*/false);
  ASSERT_EQ(s.code(), StatusCode::kInfeasible) << s.message();
  EXPECT_NE(s.message().find("no plan fits tile memory; the closest found: "
                             "tile "),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("B vs capacity 77824 B"), std::string::npos)
      << s.message();
}

// A patch embedding: image [1,3,34,34] (input; the last 2 pixels of each
// side are dropped) -> Patchify p=8 -> [16,192] x w [192,64] -> y. The
// host writes the patches (recipe host, HostBinding.patch), in F16 and
// with quantize-fp8's cast, and the simulator matches the reference.
fb::ModuleT PatchEmbedding() {
  return plan::PatchEmbeddingModule("tiny", 34, 8, 64);
}

TEST(PipelinePatchifyTest, TheHostWritesThePatches) {
  for (bool fp8 : {false, true}) {
    fb::ModuleT m = PatchEmbedding();
    Status s = RunDefaultPipeline(&m, fp8);
    ASSERT_TRUE(s.ok()) << s.message();
    // The image is bound with the transform; the patches get no other
    // binding and no op computes them on a tile.
    int patched = 0;
    for (const auto& b : m.program->inputs) {
      EXPECT_NE(b->value, 1u);
      if (b->value == 0) {
        EXPECT_EQ(b->patch, 8);
        EXPECT_FALSE(b->fragments.empty());
        ++patched;
      }
    }
    EXPECT_EQ(patched, 1);
    for (const auto& step : m.program->supersteps) {
      for (const auto& c : step->compute) EXPECT_NE(c->op, 0u);
    }
    testing::SimCheck check;
    s = testing::SimulateAgainstReference(m, sim::Tolerance{2e-2, 1e-2, 0.9999},
                                          &check);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_TRUE(check.pass) << (fp8 ? "fp8: " : "f16: ") << check.message;
  }
}

TEST(PipelinePatchifyTest, TheVerifierChecksPatchBindings) {
  fb::ModuleT m = PatchEmbedding();
  ASSERT_TRUE(passes::RunPipeline(&m, [](std::string_view name)
                                           -> std::unique_ptr<passes::Pass> {
                if (name == "quantize-fp8") return quantize::KeepDTypesPass();
                return nullptr;
              }).ok());
  ASSERT_TRUE(sim::VerifyDeviceProgram(m).ok());
  fb::HostBindingT* image = nullptr;
  fb::HostBindingT* weight = nullptr;
  for (auto& b : m.program->inputs) {
    (b->value == 0 ? image : weight) = b.get();
  }
  ASSERT_TRUE(image && weight);
  image->patch = 35;  // larger than the 34-pixel image
  Status s = sim::VerifyDeviceProgram(m);
  EXPECT_NE(s.message().find("patch=35 must be positive and at most the "
                             "image's height and width [1,3,34,34]"),
            std::string::npos)
      << s.message();
  image->patch = 8;
  weight->patch = 8;
  s = sim::VerifyDeviceProgram(m);
  EXPECT_NE(s.message().find("patch=8 is for inputs of shape [B, C, H, W]"),
            std::string::npos)
      << s.message();
  // Without the transform the image's boxes do not fit its fragments.
  weight->patch = 0;
  image->patch = 0;
  EXPECT_FALSE(sim::VerifyDeviceProgram(m).ok());
}

// The row movements of issue 12 (a class token before each image's patches,
// a position table over the batch, each image's class row for a head),
// through the whole pipeline on the tiny target, F16 and FP8: emit-device's
// prediction is the simulator's count, and the outputs equal the
// reference's exactly unless the planner splits the head's GEMM along K.
TEST(PipelineCopyRowsTest, RowsMoveExactly) {
  for (bool fp8 : {false, true}) {
    fb::ModuleT m = plan::RowMovementModule("tiny", 3, 5, 32, 24);
    Status s = RunDefaultPipeline(&m, fp8);
    ASSERT_TRUE(s.ok()) << s.message();
    int copies = 0;
    for (const auto& op : m.ops) {
      if (op->kind != fb::OpKind::CopyRows) continue;
      ++copies;
      ASSERT_TRUE(op->recipe);
      EXPECT_EQ(op->recipe->kind, fb::RecipeKind::Copy);
    }
    EXPECT_EQ(copies, 3);
    const testing::ProgramFigures summary = testing::ProgramFiguresOf(m);
    const bool k_split = HasKSplitGemm(m);
    testing::SimCheck check;
    s = testing::SimulateAgainstReference(
        m,
        k_split || fp8 ? sim::Tolerance{2e-2, 1e-2, 0.9999}
                       : sim::Tolerance{0, 0, 0.999999},
        &check);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_TRUE(check.pass) << (fp8 ? "fp8: " : "f16: ") << check.message;
    if (!k_split) {
      EXPECT_EQ(check.max_abs_err, 0) << (fp8 ? "fp8" : "f16");
    }
    EXPECT_EQ(check.result.total_cycles, summary.predicted);
    std::printf("copy rows %s: simulated %lld cycles, planner %lld, "
                "max_abs_err %g\n",
                fp8 ? "fp8" : "f16",
                static_cast<long long>(check.result.total_cycles),
                static_cast<long long>(summary.planned), check.max_abs_err);
  }
}

// LayerScale (issue 27): an encoder layer whose residual branches are
// multiplied by per-channel vectors, compiled for tiny in F16 and FP8 and
// simulated against the reference; the planner's prediction is the
// simulator's count, and the Mul survives as a binary_row call (alone or
// fused where fuse-elementwise's pricing says so).
TEST(PipelineLayerScaleTest, LayerScaleLayerSimulatesLikeTheReference) {
  for (bool fp8 : {false, true}) {
    fb::ModuleT m = plan::LayerScaleLayer("tiny", 12, 2);
    Status s = RunDefaultPipeline(&m, fp8);
    ASSERT_TRUE(s.ok()) << s.message();
    const int binary_row_calls = KernelCalls(m, "binary_row");
    EXPECT_GT(binary_row_calls, 0);
    // The Mul's op after fuse-elementwise: alone, or in a longer body.
    const std::string layer_scale_ops =
        OpsWithStep(m, [](const fb::FusedStepT& step) {
          return step.kind == fb::FusedStepKind::Binary;
        });
    ExpectSimulatesAsPredicted(m, fp8, "layer scale",
                               std::to_string(binary_row_calls) +
                                   " binary_row calls; ops:" + layer_scale_ops);
  }
}

// Per-token scales: the LayerScale layer with [rows, 1] columns (a weight,
// and the sigmoid of a graph input computed on the device), compiled for
// tiny in F16 and FP8 and simulated against the reference; the planner's
// prediction is the simulator's count, and each Mul survives as binary_col
// calls reading the rows of their tile's block.
TEST(PipelineRowGateTest, RowGateLayerSimulatesLikeTheReference) {
  for (bool fp8 : {false, true}) {
    fb::ModuleT m = plan::RowGateLayer("tiny", 12, 2);
    Status s = RunDefaultPipeline(&m, fp8);
    ASSERT_TRUE(s.ok()) << s.message();
    const int binary_col_calls = KernelCalls(m, "binary_col");
    EXPECT_GT(binary_col_calls, 0);
    const std::string gate_ops =
        OpsWithStep(m, [](const fb::FusedStepT& step) {
          return step.kind == fb::FusedStepKind::Binary &&
                 step.broadcast == fb::Broadcast::Column;
        });
    EXPECT_NE(gate_ops, "");
    ExpectSimulatesAsPredicted(m, fp8, "row gate",
                               std::to_string(binary_col_calls) +
                                   " binary_col calls; ops:" + gate_ops);
  }
}

// The first superstep with a compute call (compute) or transfer of op `id`,
// -1 if none.
int FirstStepOf(const fb::ModuleT& m, uint32_t id, bool compute) {
  const auto& steps = m.program->supersteps;
  for (size_t s = 0; s < steps.size(); ++s) {
    if (compute) {
      for (const auto& c : steps[s]->compute) {
        if (c->op == id) return static_cast<int>(s);
      }
    } else {
      for (const auto& t : steps[s]->exchange) {
        if (t->op == id) return static_cast<int>(s);
      }
    }
  }
  return -1;
}

// emit-device places each phase of an op when the operands that phase
// reads are ready: the attention context's probabilities are ready where
// the softmax computes them, and its v arrives before that, in the exchange
// of an earlier superstep (placed by all its operands, v would wait for
// them). It shares a superstep only where merged its phases cost no more
// than apart, which every share decision's cycles show.
TEST(PipelineShareTest, StagingWaitsOnlyForWhatItReads) {
  fb::ModuleT m = testing::Import("siglip-so400m-384", "layer", "tiny", 17,
                                  64, 128, 4);
  ASSERT_TRUE(RunDefaultPipeline(&m, false).ok());
  uint32_t softmax = 0, context = 0;
  for (const auto& op : m.ops) {
    if (op->kind == fb::OpKind::Softmax) softmax = op->id;
    if (op->kind == fb::OpKind::AttentionContext) context = op->id;
  }
  ASSERT_NE(context, 0u);
  const int softmax_step = FirstStepOf(m, softmax, true);
  ASSERT_GE(softmax_step, 0);
  EXPECT_LT(FirstStepOf(m, context, false), softmax_step);
  int shares = 0;
  for (const auto& run : m.log) {
    for (const auto& d : run->decisions) {
      if (d->action.rfind("share supersteps ", 0) != 0) continue;
      ++shares;
      if (d->outcome == fb::Outcome::Accepted) {
        EXPECT_LE(d->cycles_after, d->cycles_before) << d->action;
      } else {
        EXPECT_GT(d->cycles_after, d->cycles_before) << d->action;
      }
    }
  }
  EXPECT_GT(shares, 0);
  ExpectSimulatesAsPredicted(m, false, "layer", "phases placed by readiness");
}

}  // namespace
}  // namespace tilec::lower
