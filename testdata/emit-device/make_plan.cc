// make_plan CASE OUT: writes a hand-planned, expand-reduced module
// (passes/lower/hand_plan.h) for emit-device's golden tests.
//   too-big: the MLP block [64,128] x [128,256] on two tiles of the tiny
//            target, which cannot hold its weights.

#include <iostream>
#include <string>

#include "formats/ir.h"
#include "passes/lower/expand_reduce.h"
#include "passes/lower/hand_plan.h"

int main(int argc, char** argv) {
  using namespace tilec::lower;
  if (argc != 3 || std::string(argv[1]) != "too-big") {
    std::cerr << "usage: make_plan too-big OUT\n";
    return 2;
  }
  tilec::fb::ModuleT m =
      testing::Import("siglip-so400m-384", "mlp-block", "tiny", 64, 128, 256, 1);
  testing::MlpPlan plan;
  plan.ln_parts = 2;
  plan.up = testing::GemmShape{1, 2, 1};
  plan.down = testing::GemmShape{1, 2, 1};
  testing::PlanMlpBlock(&m, plan);
  tilec::Status s = ExpandReducePass().Run(&m).status();
  if (s.ok()) s = tilec::ir::WriteModule(m, "make_plan", argv[2]);
  if (!s.ok()) {
    std::cerr << "make_plan: " << s.message() << "\n";
    return s.exit_code();
  }
  return 0;
}
