// Per-tile memory of a device program over its supersteps. The program
// stores addresses, not lifetimes, so lifetimes are derived from use:
//
//  - a buffer is live from the first superstep that names it (a compute
//    argument, a transfer's source or one of its destinations) to the last;
//  - buffers the host writes (input and weight bindings) are live from
//    superstep 0, weights to the last superstep (they stay resident), and
//    buffers the host reads (output bindings) to the last superstep;
//  - a buffer that nothing names is never live (it still counts for the
//    tile's highest buffer end, as the simulator counts it).
//
// A tile's live bytes in a superstep are the bytes of the union of its live
// buffers' address ranges: buffers that alias (memory that one op frees and
// a later one reuses within the same superstep; the simulator's check
// refuses any other aliasing) count once.
// At superstep granularity, two buffers that are live in different parts of
// one superstep both count, so this is at least emit-device's finer "most
// bytes live at once" and at most the tile's highest buffer end.

#ifndef TILEC_PASSES_INSPECT_MEMORY_USE_H_
#define TILEC_PASSES_INSPECT_MEMORY_USE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "passes/inspect/device_module.h"

namespace tilec::inspect {

struct BufferLife {
  uint32_t id = 0;
  int tile = 0;
  int64_t offset = 0;
  int64_t bytes = 0;
  int64_t value = -1;  // provenance, as in the program
  int64_t op = -1;
  std::string name;
  bool host_written = false;  // an input or weight binding writes it
  bool weight = false;        // holds (part of) a weight: resident
  bool host_read = false;     // an output binding reads it
  // Supersteps, inclusive; first > last when no superstep names it and no
  // binding makes it live.
  int first = 0;
  int last = -1;
  bool live() const { return first <= last; }
};

struct MemoryUse {
  int supersteps = 0;
  std::vector<BufferLife> buffers;         // in program order
  std::vector<std::vector<int64_t>> live;  // [tile][superstep] bytes
  std::vector<int64_t> peak_live;          // per tile: max over supersteps
  std::vector<int> peak_step;  // per tile: first superstep at its peak, -1
                               // when nothing is ever live there
  std::vector<int64_t> highest_end;  // per tile: over every declared buffer
  int64_t never_live = 0;            // buffers that nothing names
};

// Errors (kBadInput): no program or target, a buffer on a tile outside the
// target, a superstep or binding naming an undeclared buffer.
StatusOr<MemoryUse> MemoryOverTime(const fb::ModuleT& module);
// The same of a program already verified.
StatusOr<MemoryUse> MemoryOverTime(const VerifiedProgram& program);

}  // namespace tilec::inspect

#endif  // TILEC_PASSES_INSPECT_MEMORY_USE_H_
