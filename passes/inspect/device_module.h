// The check every reader of a device program starts with: the module has a
// program (emit-device's output) and the target it was emitted for, and the
// program passes the simulator's verifier (every tile, buffer, range and
// transfer within bounds), so no report is computed from nonsense.

#ifndef TILEC_PASSES_INSPECT_DEVICE_MODULE_H_
#define TILEC_PASSES_INSPECT_DEVICE_MODULE_H_

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "sim/simulator.h"

namespace tilec::inspect {

inline Status RequireDeviceProgram(const fb::ModuleT& module) {
  if (!module.program) {
    return Status::BadInput(
        "module has no device program (emit-device writes one)");
  }
  if (!module.target) return Status::BadInput("module has no target");
  return sim::VerifyDeviceProgram(module);
}

}  // namespace tilec::inspect

#endif  // TILEC_PASSES_INSPECT_DEVICE_MODULE_H_
