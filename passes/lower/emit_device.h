// emit-device: from a lowered planned module (plan-ownership, then
// expand-reduce) to a device program (docs/device-program.md) that
// simulate-device executes.
//
//  1. Every op is lowered in program order (lowering.h) into phases over
//     virtual buffers, following its recipe and the reduction choices of
//     expand-reduce.
//  2. Phases are placed in supersteps as soon as their operands are ready
//     (a value computed in superstep s can be read by a later op's compute
//     in s on the same tile or sent in s's exchange; a value received in s
//     is usable from s+1), so independent work of different ops shares
//     supersteps. Sharing never adds cycles (a phase costs its slowest tile,
//     merged phases at most the sum) but lengthens lifetimes; if memory then
//     does not fit, the program is rebuilt with one op per superstep.
//  3. Every buffer gets an address on its tile (allocate.h): lifetimes in
//     program order so dead buffers are reused, 8-byte alignment, GEMM
//     outputs in interleaved memory apart from their left operand's element,
//     binary inputs in different elements when possible.
//  4. Host bindings: inputs and weights in, outputs out.
//
// Every choice is a Decision in the pass log; the program's cycles as the
// simulator will count them are predicted and logged.

#ifndef TILEC_PASSES_LOWER_EMIT_DEVICE_H_
#define TILEC_PASSES_LOWER_EMIT_DEVICE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "passes/core/pass.h"
#include "passes/core/pass_table.h"

namespace tilec::lower {

struct EmitOptions {
  bool share_supersteps = true;  // --share_supersteps
  bool alias_in_place = true;    // --alias_in_place
};

// Figures of the emitted program (also in the pass log).
struct EmitSummary {
  int64_t predicted_cycles = 0;  // as simulate-device counts them
  int64_t compute_cycles = 0;
  int64_t exchange_cycles = 0;            // scheduled + sync, every phase
  int64_t exchange_bound_cycles = 0;      // endpoint bounds, without sync
  int64_t exchange_scheduled_cycles = 0;  // schedule lengths
  int64_t update_cycles = 0;              // repeats' address updates
  int64_t code_bytes_max = 0;             // code of the tile with the most
  int64_t exchange_code_bytes_max = 0;
  int64_t tensor_bytes = -1;  // what the tile with the most code has left
  int supersteps = 0;
  int exchange_phases = 0;
  int64_t bytes_received = 0;
  int64_t peak_bytes = 0;  // highest buffer end on any tile
  int peak_tile = -1;
  int64_t planner_cycles = 0;  // sum of the ops' estimates
  bool shared = false;         // supersteps shared between ops
};

// Replaces module->program and appends the "emit-device" pass run.
// Takes a planned graph (K-split GEMMs need expand-reduce first: refused
// naming the op), a lowered one or a device program (rebuilt). Errors:
// kInfeasible when memory does not fit (names the tile, the live buffers
// with op ids and sizes, and the shortfall).
class EmitDevicePass : public passes::Pass {
 public:
  explicit EmitDevicePass(EmitOptions options = {},
                          passes::PassOptions common = {})
      : Pass(passes::kEmitDeviceInfo, std::move(common)), options_(options) {}
  // The figures of the last program emitted.
  const EmitSummary& summary() const { return summary_; }

 protected:
  StatusOr<bool> Transform(fb::ModuleT* module,
                           passes::DecisionLog* log) override;

 private:
  EmitOptions options_;
  EmitSummary summary_;
};

}  // namespace tilec::lower

#endif  // TILEC_PASSES_LOWER_EMIT_DEVICE_H_
