// The check every reader of a device program starts with: the module has a
// program (emit-device's output) and the target it was emitted for.

#ifndef TILEC_PASSES_INSPECT_DEVICE_MODULE_H_
#define TILEC_PASSES_INSPECT_DEVICE_MODULE_H_

#include "formats/status.h"
#include "formats/tilec_generated.h"

namespace tilec::inspect {

inline Status RequireDeviceProgram(const fb::ModuleT& module) {
  if (!module.program) {
    return Status::BadInput(
        "module has no device program (emit-device writes one)");
  }
  if (!module.target) return Status::BadInput("module has no target");
  return Status::Ok();
}

}  // namespace tilec::inspect

#endif  // TILEC_PASSES_INSPECT_DEVICE_MODULE_H_
