// expand-reduce: makes every reduction of a planned module explicit
// (passes/lower/expand_reduce.h, docs/lowering.md).

#include <gflags/gflags.h>

#include "passes/lower/expand_reduce.h"
#include "passes/lower/verify_planned.h"
#include "tools/common/pass_tool.h"

namespace {

const tilec::lower::ExpandReduceOptions kDefaults;

}  // namespace

DEFINE_int32(partials_per_epoch, kDefaults.partials_per_epoch,
             "Remote partials received per exchange phase: 0 decides (all at "
             "once unless a tile's memory does not fit), N caps it at N.");
DEFINE_bool(f16_partials, kDefaults.allow_16bit_partials,
            "Allow K-split GEMM partials in the result's 16-bit dtype where "
            "each tile writes its partial with one call (half the exchange "
            "of F32; each partial rounded once). false: always F32.");

int main(int argc, char** argv) {
  return tilec::tools::PassToolMain(
      argc, argv, tilec::passes::kExpandReduceInfo,
      [](tilec::passes::PassOptions common)
          -> tilec::StatusOr<std::unique_ptr<tilec::passes::Pass>> {
        if (FLAGS_partials_per_epoch < 0) {
          return tilec::Status::BadInput("--partials_per_epoch must be >= 0");
        }
        tilec::lower::ExpandReduceOptions options;
        options.partials_per_epoch = FLAGS_partials_per_epoch;
        options.allow_16bit_partials = FLAGS_f16_partials;
        return std::unique_ptr<tilec::passes::Pass>(
            new tilec::lower::ExpandReducePass(options, std::move(common)));
      },
      tilec::lower::VerifyPlanned);
}
