// fuse-residual: a residual add computes the following LayerNorm's row
// statistics where that is cheaper (passes/fuse/residual.h,
// docs/fusion.md).

#include "passes/fuse/residual.h"
#include "passes/lower/verify_planned.h"
#include "tools/common/pass_tool.h"

int main(int argc, char** argv) {
  return tilec::tools::PassToolMain(
      argc, argv, tilec::passes::kFuseResidualInfo,
      [](tilec::passes::PassOptions common)
          -> tilec::StatusOr<std::unique_ptr<tilec::passes::Pass>> {
        return std::unique_ptr<tilec::passes::Pass>(
            new tilec::fuse::FuseResidualPass(std::move(common)));
      },
      tilec::lower::VerifyPlanned);
}
