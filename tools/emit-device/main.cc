// emit-device: turns a lowered planned module into a device program
// (passes/lower/emit_device.h, docs/lowering.md, docs/device-program.md).

#include <gflags/gflags.h>

#include "passes/lower/emit_device.h"
#include "passes/lower/verify_planned.h"
#include "tools/common/pass_tool.h"

namespace {

const tilec::lower::EmitOptions kDefaults;

}  // namespace

DEFINE_bool(share_supersteps, kDefaults.share_supersteps,
            "Let independent work of different ops share supersteps (undone "
            "automatically when memory does not fit).");
DEFINE_bool(alias_in_place, kDefaults.alias_in_place,
            "Use an operand's buffer in place when a tile already holds "
            "exactly the data an op needs.");

int main(int argc, char** argv) {
  return tilec::tools::PassToolMain(
      argc, argv, tilec::passes::kEmitDeviceInfo,
      [](tilec::passes::PassOptions common)
          -> tilec::StatusOr<std::unique_ptr<tilec::passes::Pass>> {
        tilec::lower::EmitOptions options;
        options.share_supersteps = FLAGS_share_supersteps;
        options.alias_in_place = FLAGS_alias_in_place;
        return std::unique_ptr<tilec::passes::Pass>(
            new tilec::lower::EmitDevicePass(options, std::move(common)));
      },
      tilec::lower::VerifyPlanned);
}
