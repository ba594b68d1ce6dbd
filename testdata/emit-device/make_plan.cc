// make_plan CASE OUT: writes a hand-planned, expand-reduced module
// (passes/lower/hand_plan.h) for emit-device's golden tests.
//   too-big:      the MLP block [64,128] x [128,256] on two tiles of the
//                 tiny target, which cannot hold its weights.
//   code-too-big: a small MLP block on tiny whose runtime is made to fill
//                 all but 64 B of the standard elements, so that the
//                 program's own code and exchange tables cannot fit.

#include <iostream>
#include <string>

#include "formats/ir.h"
#include "passes/lower/expand_reduce.h"
#include "passes/lower/hand_plan.h"

int main(int argc, char** argv) {
  using namespace tilec::lower;
  const std::string which = argc == 3 ? argv[1] : "";
  if (which != "too-big" && which != "code-too-big") {
    std::cerr << "usage: make_plan too-big|code-too-big OUT\n";
    return 2;
  }
  const bool code = which == "code-too-big";
  tilec::fb::ModuleT m = testing::Import("siglip-so400m-384", "mlp-block",
                                         "tiny", code ? 16 : 64, code ? 32 : 128,
                                         code ? 64 : 256, 1);
  testing::MlpPlan plan;
  plan.ln_parts = 2;
  plan.up = testing::GemmShape{1, 2, 1};
  plan.down = testing::GemmShape{1, 2, 1};
  testing::PlanMlpBlock(&m, plan);
  if (code) {
    m.target->runtime_code_bytes =
        m.target->standard_elements * m.target->element_bytes - 64;
  }
  tilec::Status s = ExpandReducePass().Run(&m).status();
  if (s.ok()) s = tilec::ir::WriteModule(m, "make_plan", argv[2]);
  if (!s.ok()) {
    std::cerr << "make_plan: " << s.message() << "\n";
    return s.exit_code();
  }
  return 0;
}
