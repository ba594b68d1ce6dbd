#include "passes/lower/emit_device.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "formats/ir.h"
#include "formats/print.h"
#include "passes/lower/hand_plan.h"

namespace tilec::lower {
namespace {

using testing::DefaultReductions;
using testing::GemmShape;
using testing::Import;
using testing::MlpPlan;
using testing::PlanMlpBlock;
using testing::SimCheck;
using testing::SimulateAgainstReference;

fb::ModuleT PlannedMlp(const MlpPlan& plan, int64_t tokens = 12,
                       int64_t width = 32, int64_t mlp = 64) {
  fb::ModuleT m = Import("siglip-so400m-384", "mlp-block", "tiny", tokens,
                         width, mlp);
  PlanMlpBlock(&m, plan);
  DefaultReductions(&m);
  return m;
}

TEST(EmitDeviceTest, MlpBlockKSplitSimulatesLikeTheReference) {
  MlpPlan plan;
  plan.ln_parts = 4;
  plan.up = GemmShape{2, 2, 2};
  plan.down = GemmShape{2, 2, 4};
  fb::ModuleT m = PlannedMlp(plan);
  EmitSummary summary;
  Status s = EmitDevice(&m, EmitOptions{}, &summary);
  ASSERT_TRUE(s.ok()) << s.message();
  SimCheck check;
  s = SimulateAgainstReference(m, sim::Tolerance{2e-2, 1e-2, 0.9999}, &check);
  ASSERT_TRUE(s.ok()) << s.message() << "\n" << ir::PrintModule(m, {true});
  EXPECT_TRUE(check.pass) << check.message;
  EXPECT_EQ(check.result.total_cycles, summary.predicted_cycles);
  if (const char* path = std::getenv("EMIT_DUMP")) {
    ASSERT_TRUE(ir::WriteModule(m, "emit_device_test", path).ok());
  }
}

}  // namespace
}  // namespace tilec::lower
