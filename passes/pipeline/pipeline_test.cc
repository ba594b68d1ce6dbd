#include "passes/pipeline/pipeline.h"

#include <gtest/gtest.h>

#include "formats/ir.h"
#include "passes/core/pass_table.h"
#include "passes/import/model_builder.h"

namespace tilec::passes {
namespace {

TEST(PipelineTest, EveryPassOfThePipelineExistsUnderItsName) {
  ASSERT_FALSE(DefaultPipeline().empty());
  for (const std::string& name : DefaultPipeline()) {
    StatusOr<std::unique_ptr<Pass>> pass = MakePass(name);
    ASSERT_TRUE(pass.ok()) << pass.status().message();
    EXPECT_EQ((*pass)->name(), name);
  }
  EXPECT_EQ(MakePass("no-such-pass").status().code(), StatusCode::kBadInput);
}

TEST(PipelineTest, EveryPassOfTheTableHasAMaker) {
  for (const PassInfo* info : AllPassInfos()) {
    StatusOr<std::unique_ptr<Pass>> pass = MakePass(info->name);
    ASSERT_TRUE(pass.ok()) << pass.status().message();
    EXPECT_EQ(&(*pass)->info(), info);
  }
}

TEST(PipelineTest, RunsEveryPassInOrderAndLogsEach) {
  fb::ModuleT module;
  module.target = std::make_unique<fb::TargetT>();
  ASSERT_TRUE(ir::LoadTarget("tiny", module.target.get()).ok());
  ModelOverrides o;
  o.tokens = 8;
  o.width = 16;
  o.mlp_width = 32;
  o.heads = 1;
  ASSERT_TRUE(BuildModel("siglip-so400m-384", "mlp-block", o, &module).ok());
  ASSERT_TRUE(RunPipeline(&module).ok());
  ASSERT_EQ(module.log.size(), DefaultPipeline().size());
  for (size_t i = 0; i < module.log.size(); ++i) {
    EXPECT_EQ(module.log[i]->pass, DefaultPipeline()[i]);
  }
  EXPECT_EQ(StageOf(module), Stage::kProgram);
}

TEST(PipelineTest, APassRefusesAnInputFromTooEarlyAStage) {
  fb::ModuleT module;
  StatusOr<std::unique_ptr<Pass>> emit = MakePass("emit-device");
  ASSERT_TRUE(emit.ok());
  Status s = (*emit)->Run(&module).status();
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
  EXPECT_EQ(s.message(),
            "emit-device needs a planned graph, a lowered graph (after "
            "expand-reduce) or a device program, not an unplanned graph: run "
            "plan-ownership first");
}

}  // namespace
}  // namespace tilec::passes
