#include "passes/inspect/memory_use.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "passes/inspect/test_program.h"

namespace tilec::inspect {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

MemoryUse Use(const TestProgram& p) {
  StatusOr<MemoryUse> use = MemoryOverTime(p.Completed());
  EXPECT_TRUE(use.ok()) << use.status().message();
  return use.ok() ? *use : MemoryUse();
}

TEST(MemoryUse, LiveFromFirstToLastSuperstepThatNamesTheBuffer) {
  TestProgram p;
  const uint32_t a = p.AddBuffer(0, 0, 96);
  const uint32_t b = p.AddBuffer(0, 1024, 200);
  for (int s = 0; s < 3; ++s) p.AddStep("s" + std::to_string(s));
  p.AddCompute(0, 0, "copy", {a, a}, {96}, 1);
  p.AddCompute(1, 0, "copy", {b, b}, {200}, 1);
  p.AddCompute(2, 0, "copy", {a, a}, {96}, 1);
  const MemoryUse use = Use(p);
  EXPECT_EQ(use.buffers[a].first, 0);
  EXPECT_EQ(use.buffers[a].last, 2);
  EXPECT_EQ(use.buffers[b].first, 1);
  EXPECT_EQ(use.buffers[b].last, 1);
  // a is live across step 1 although step 1 does not name it.
  EXPECT_THAT(use.live[0], ElementsAre(96, 296, 96));
  EXPECT_EQ(use.peak_live[0], 296);
  EXPECT_EQ(use.peak_step[0], 1);
  EXPECT_EQ(use.highest_end[0], kTensorBase + 1224);
  EXPECT_THAT(use.live[1], ElementsAre(0, 0, 0));
  EXPECT_EQ(use.peak_step[1], -1);
}

TEST(MemoryUse, TransfersMakeSourceAndDestinationsLive) {
  TestProgram p;
  const uint32_t src = p.AddBuffer(0, 0, 64);
  const uint32_t dst1 = p.AddBuffer(1, 512, 64);
  const uint32_t dst2 = p.AddBuffer(2, 0, 64);
  p.AddStep("a");
  p.AddStep("b");
  p.AddCompute(0, 0, "copy", {src, src}, {64}, 1);
  p.AddTransfer(1, 0, src, 64, 1, {{1, dst1}, {2, dst2}}, 1);
  const MemoryUse use = Use(p);
  EXPECT_THAT(use.live[0], ElementsAre(64, 64));
  EXPECT_THAT(use.live[1], ElementsAre(0, 64));
  EXPECT_THAT(use.live[2], ElementsAre(0, 64));
  EXPECT_EQ(use.highest_end[1], kTensorBase + 576);
}

// Inputs from superstep 0, weights for the whole program, outputs to the
// last superstep; a buffer nothing names is never live but still counts
// for the highest buffer end.
TEST(MemoryUse, HostBindingsExtendLifetimesToTheProgramsEnds) {
  TestProgram p;
  const uint32_t x =
      p.AddValue("x", {4, 8}, fb::DType::F16, fb::ValueRole::Input);
  const uint32_t w =
      p.AddValue("w", {8}, fb::DType::F16, fb::ValueRole::Weight);
  const uint32_t y =
      p.AddValue("y", {4, 8}, fb::DType::F16, fb::ValueRole::Output);
  const uint32_t xb = p.AddBuffer(0, 0, 64);
  const uint32_t wb = p.AddBuffer(0, 64, 16);
  const uint32_t yb = p.AddBuffer(0, 128, 64);
  const uint32_t unused = p.AddBuffer(0, 40000, 8);
  for (int s = 0; s < 4; ++s) p.AddStep("s" + std::to_string(s));
  p.AddCompute(0, 0, "bias_add", {yb, wb, yb}, {4, 8}, 1);
  p.AddCompute(2, 0, "copy", {xb, yb}, {64}, 2);
  p.BindInput(x, 0, xb);
  p.BindInput(w, 0, wb);
  p.BindOutput(y, 0, yb);
  const MemoryUse use = Use(p);
  EXPECT_EQ(use.buffers[xb].first, 0);  // written by the host before step 0
  EXPECT_EQ(use.buffers[xb].last, 2);
  EXPECT_TRUE(use.buffers[xb].host_written);
  EXPECT_FALSE(use.buffers[xb].weight);
  EXPECT_EQ(use.buffers[wb].last, 3);  // resident
  EXPECT_TRUE(use.buffers[wb].weight);
  EXPECT_EQ(use.buffers[yb].last, 3);  // read by the host after step 3
  EXPECT_TRUE(use.buffers[yb].host_read);
  EXPECT_FALSE(use.buffers[unused].live());
  EXPECT_EQ(use.never_live, 1);
  EXPECT_THAT(use.live[0], ElementsAre(144, 144, 144, 80));
  EXPECT_EQ(use.highest_end[0], kTensorBase + 40008);
}

// Memory one op frees and a later op reuses within the same superstep:
// the aliasing buffers count once, as the union of their address ranges.
TEST(MemoryUse, AliasingBuffersCountTheirUnion) {
  TestProgram p;
  p.AddOp(1, fb::OpKind::Add, "first");
  p.AddOp(2, fb::OpKind::Add, "second");
  const uint32_t x = p.AddBuffer(0, 0, 256);     // [0, 256), steps 0-1
  const uint32_t y = p.AddBuffer(0, 128, 256);   // [128, 384), steps 1-2
  const uint32_t z = p.AddBuffer(0, 0, 64);      // [0, 64), step 1
  const uint32_t far = p.AddBuffer(0, 4096, 8);  // apart, steps 0-2
  for (int s = 0; s < 3; ++s) p.AddStep("s" + std::to_string(s));
  p.AddCompute(0, 0, "copy", {x, far}, {8}, 1);
  p.AddCompute(1, 0, "copy", {x, far}, {8}, 1);
  // Op 2 runs after op 1's last read of x.
  p.AddCompute(1, 0, "copy", {z, y}, {64}, 2);
  p.AddCompute(2, 0, "copy", {y, far}, {8}, 2);
  const MemoryUse use = Use(p);
  // Step 1: [0, 384) once (the sum would be 256 + 256 + 64), plus 8.
  EXPECT_THAT(use.live[0], ElementsAre(264, 392, 264));
  EXPECT_EQ(use.peak_live[0], 392);
}

TEST(MemoryUse, ReusedAddressesInSuccessiveSupersteps) {
  TestProgram p;
  p.AddOp(1, fb::OpKind::Add, "first");
  p.AddOp(2, fb::OpKind::Add, "second");
  const uint32_t a = p.AddBuffer(3, 1000, 100);  // steps 0-1
  const uint32_t b = p.AddBuffer(3, 1000, 100);  // the same bytes, steps 2-3
  // Over a's upper half, step 1 after op 1's last read of a.
  const uint32_t c = p.AddBuffer(3, 1048, 100);
  for (int s = 0; s < 4; ++s) p.AddStep("s" + std::to_string(s));
  p.AddCompute(0, 3, "copy", {a, a}, {100}, 1);
  p.AddCompute(1, 3, "copy", {a, a}, {100}, 1);
  p.AddCompute(1, 3, "copy", {c, c}, {100}, 2);
  p.AddCompute(2, 3, "copy", {b, b}, {100}, 1);
  p.AddCompute(3, 3, "copy", {b, b}, {100}, 1);
  const MemoryUse use = Use(p);
  EXPECT_THAT(use.live[3], ElementsAre(100, 148, 100, 100));
  EXPECT_EQ(use.peak_step[3], 1);
}

TEST(MemoryUse, ErrorsNameTheBufferAndTile) {
  {
    TestProgram p;
    p.AddBuffer(16, 0, 8);
    StatusOr<MemoryUse> use = MemoryOverTime(p.Completed());
    ASSERT_FALSE(use.ok());
    EXPECT_EQ(use.status().code(), StatusCode::kBadInput);
    EXPECT_THAT(use.status().message(),
                HasSubstr("buffer #0 \"b0\" on tile 16: tile out of range "
                          "(target has 16 tiles)"));
  }
  {
    TestProgram p;
    const uint32_t a = p.AddBuffer(0, 0, 8);
    p.AddStep("a");
    p.AddStep("b");
    p.AddCompute(1, 0, "copy", {a, a}, {8}, 1);
    p.module.program->supersteps[1]->compute[0]->args[1]->buffer = 9;
    StatusOr<MemoryUse> use = MemoryOverTime(p.Completed());
    ASSERT_FALSE(use.ok());
    EXPECT_THAT(use.status().message(),
                HasSubstr("superstep 1 tile 0 op 1 compute 0 (copy): arg 1 "
                          "buffer #9 does not exist"));
  }
  {
    fb::ModuleT empty;
    EXPECT_THAT(MemoryOverTime(empty).status().message(),
                HasSubstr("no device program"));
  }
}

}  // namespace
}  // namespace tilec::inspect
