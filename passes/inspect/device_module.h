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

// A module whose device program passed those checks. Checking a whole
// model's program takes seconds (so400m's 18.7 M transfers at batch 1), so
// a report checks it once, with the simulator that then times it, and
// hands it checked to each of its figures.
class VerifiedProgram {
 public:
  // `simulator`, if given, is made for `module` and runs the verifier's
  // checks; it can then run the program without checking it again.
  static StatusOr<VerifiedProgram> Verify(const fb::ModuleT& module,
                                          sim::Simulator* simulator = nullptr) {
    if (!module.program) {
      return Status::BadInput(
          "module has no device program (emit-device writes one)");
    }
    if (!module.target) return Status::BadInput("module has no target");
    TILEC_RETURN_IF_ERROR(simulator ? simulator->Verify()
                                    : sim::VerifyDeviceProgram(module));
    return VerifiedProgram(module);
  }

  const fb::ModuleT& module() const { return *module_; }

 private:
  explicit VerifiedProgram(const fb::ModuleT& module) : module_(&module) {}
  const fb::ModuleT* module_;
};

}  // namespace tilec::inspect

#endif  // TILEC_PASSES_INSPECT_DEVICE_MODULE_H_
