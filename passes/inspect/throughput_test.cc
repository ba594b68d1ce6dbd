#include "passes/inspect/throughput.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "formats/ir.h"
#include "passes/import/model_builder.h"

namespace tilec::inspect {
namespace {

using ::testing::HasSubstr;

// A part of SigLIP at batch 2 with 10 tokens (unless `o` says), width 48,
// MLP 96 and 3 heads of 16 on `tiny` (16 tiles, 128 FP8 MACs per
// tile-cycle, 1.5 GHz).
fb::ModuleT SmallLayer(const char* part, passes::ModelOverrides o = {}) {
  o.batch = 2;
  if (!o.tokens) o.tokens = 10;
  o.width = 48;
  o.mlp_width = 96;
  o.heads = 3;
  fb::ModuleT m;
  m.target = std::make_unique<fb::TargetT>();
  EXPECT_TRUE(ir::LoadTarget("tiny", m.target.get()).ok());
  const Status built = passes::BuildModel("siglip-so400m-384", part, o, &m);
  EXPECT_TRUE(built.ok()) << built.message();
  return m;
}

TEST(GraphGemmMacs, LayerByHand) {
  // 20 rows through qkv (48 x 144), the output projection (48 x 48), up
  // (48 x 96) and down (96 x 48); Q·Kᵀ and P·V each 2 images x 3 heads x
  // 10 x 10 x 16.
  const int64_t rows = 2 * 10;
  const int64_t projections = rows * (48 * 144 + 48 * 48 + 48 * 96 + 96 * 48);
  const int64_t attention = 2 * (2 * 3 * 10 * 10 * 16);
  StatusOr<int64_t> macs = GraphGemmMacs(SmallLayer("layer"));
  ASSERT_TRUE(macs.ok()) << macs.status().message();
  EXPECT_EQ(*macs, projections + attention);
  EXPECT_EQ(*macs, 387840);
}

TEST(GraphGemmMacs, RepeatCountsEveryIteration) {
  passes::ModelOverrides o;
  o.layers = 3;
  o.tokens = 16;  // a square grid of 4 x 4 patches
  o.patch = 4;
  o.repeat = false;
  StatusOr<int64_t> unrolled = GraphGemmMacs(SmallLayer("model", o));
  o.repeat = true;
  const fb::ModuleT rolled = SmallLayer("model", o);
  ASSERT_EQ(rolled.repeats.size(), 1u);
  StatusOr<int64_t> macs = GraphGemmMacs(rolled);
  ASSERT_TRUE(unrolled.ok()) << unrolled.status().message();
  ASSERT_TRUE(macs.ok()) << macs.status().message();
  EXPECT_EQ(*macs, *unrolled);
  EXPECT_GT(*macs, 3 * 387840);  // 3 layers of 16 tokens and more
}

TEST(GraphGemmMacs, MatMulWithoutOperandsIsBadInput) {
  fb::ModuleT m = SmallLayer("mlp-block");
  for (auto& op : m.ops) {
    if (op->kind == fb::OpKind::MatMul) {
      op->operands.clear();
      break;
    }
  }
  StatusOr<int64_t> macs = GraphGemmMacs(m);
  ASSERT_FALSE(macs.ok());
  EXPECT_THAT(macs.status().message(),
              HasSubstr("has no [M,K] x [K,N] operands"));
}

TEST(ThroughputOf, FiguresOfALayer) {
  // 38,784 cycles for 2 images: 19,392 per image, 1.5e9 / 19,392 images
  // per second; the peak is 16 x 128 = 2,048 MACs a cycle, of which the
  // layer's 387,840 MACs fill 387,840 / (38,784 x 2,048).
  StatusOr<Throughput> t = ThroughputOf(SmallLayer("layer"), 38784);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->batch, 2);
  EXPECT_EQ(t->cycles, 38784);
  EXPECT_EQ(t->gemm_macs, 387840);
  EXPECT_DOUBLE_EQ(t->cycles_per_image, 19392);
  EXPECT_DOUBLE_EQ(t->images_per_second, 1.5e9 / 19392);
  EXPECT_EQ(t->fp8_peak_macs_per_cycle, 2048);
  EXPECT_DOUBLE_EQ(t->fp8_peak_fraction, 387840.0 / (38784.0 * 2048));
}

TEST(ThroughputOf, NoRecordedBatchHasNoPerImageFigures) {
  fb::ModuleT m = SmallLayer("mlp-block");
  m.model.reset();
  StatusOr<Throughput> t = ThroughputOf(m, 1000);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->batch, 0);
  EXPECT_EQ(t->cycles_per_image, 0);
  EXPECT_EQ(t->images_per_second, 0);
  EXPECT_GT(t->fp8_peak_fraction, 0);
}

}  // namespace
}  // namespace tilec::inspect
