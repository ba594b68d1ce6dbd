// Per-tile memory allocation for emit-device: every buffer gets an 8-byte
// aligned offset in the tile's tensor memory such that buffers whose
// lifetimes overlap do not overlap in memory (dead buffers are reused),
// buffers that must be in interleaved memory are, and pairs that must not
// (hard) or should not (soft) share a memory element do not. Soft pairs are
// dropped one buffer at a time when nothing else fits, and reported.
//
// The strategy is first fit: each buffer placed at the lowest offset that
// satisfies every rule against the buffers already placed whose lifetimes
// overlap its own. The order is lifetime order by default (by the slot
// where a buffer becomes live, then larger first): resident and
// host-written buffers start before the program and so are placed first,
// at the bottom of memory. Lifetime order leaves gaps where a short-lived
// buffer sat between long-lived ones; largest first (those from before
// the program still first, then by size) packs the large buffers before
// small ones can split the free space: the classic remedy for that
// fragmentation, tried where lifetime order fails (emit-device).

#ifndef TILEC_PASSES_LOWER_ALLOCATE_H_
#define TILEC_PASSES_LOWER_ALLOCATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "formats/tilec_generated.h"

namespace tilec::lower {

// The target's memory layout (docs/machine.md, "Memory elements").
struct MemoryMap {
  int64_t base = 0;          // the first tensor byte (code lies below it)
  int64_t capacity = 0;      // the end of the tile's memory
  int64_t standard_end = 0;  // interleaved memory starts here
  int64_t element_bytes = 1;
  int64_t interleaved_element_bytes = 1;
  int64_t standard_elements = 0;
  int64_t alignment = 8;

  // With no program code: base = the runtime's whole elements.
  static MemoryMap FromTarget(const fb::TargetT& target);
  // Memory element holding byte `addr`, numbered as the simulator does.
  int64_t ElementOf(int64_t addr) const;
  // First byte of element `element`.
  int64_t ElementStart(int64_t element) const;
  // A mask where the alignment is a power of two (a division is the
  // allocator's most frequent slow instruction); the same numbers.
  int64_t AlignUp(int64_t bytes) const {
    if (bytes >= 0 && (alignment & (alignment - 1)) == 0) {
      return (bytes + alignment - 1) & -alignment;
    }
    return (bytes + alignment - 1) / alignment * alignment;
  }
  int64_t AlignDown(int64_t bytes) const {
    if (bytes < 0) return -1;
    if ((alignment & (alignment - 1)) == 0) return bytes & -alignment;
    return bytes / alignment * alignment;
  }
};

struct AllocBuffer {
  int id = 0;           // the caller's buffer id
  int64_t bytes = 0;
  int64_t start = 0;    // first and last slot of its lifetime, inclusive
  int64_t end = 0;
  bool interleaved = false;
};

enum class AllocOrder { kLifetime, kLargestFirst };

struct AllocRule {
  int a = 0;  // buffer ids
  int b = 0;
  bool hard = false;
};

struct AllocResult {
  std::vector<int64_t> offsets;   // per input buffer, in input order
  std::vector<int> soft_dropped;  // indices of soft rules not honoured
  int64_t peak = 0;               // highest buffer end
};

struct AllocFailure {
  int buffer = -1;             // the id that did not fit
  int64_t bytes = 0;           // its aligned size
  bool interleaved = false;
  int64_t slot = 0;            // where it becomes live
  std::vector<int> live;       // ids of the buffers live there
  int64_t live_bytes = 0;
  int64_t region_bytes = 0;    // bytes of the region it may use
  int64_t largest_gap = 0;     // largest free gap in that region
  // Live buffers it must not share a memory element with (hard rules): when
  // largest_gap is big enough, these are what kept it out of every gap.
  std::vector<int> element_partners;
};

// Allocates one tile. `rules` may name ids not in `buffers` (ignored).
// Returns false and fills `failure` when some buffer does not fit.
// `floor` >= 0: buffers live from before the program (weights, weight
// homes, inputs) are packed around the boundary of standard and
// interleaved memory instead of at the bottom: downwards from the end of
// standard memory to `floor`, then upwards in interleaved memory. That
// keeps [0, floor) for buffers the program allocates as it runs, e.g. a
// GEMM's staged left operand, which must not share the interleaved element
// of the GEMM's output (on a target with one interleaved element: standard
// memory). emit-device tries floors and then largest first only for a
// tile where the default fails.
bool AllocateTile(const MemoryMap& map, const std::vector<AllocBuffer>& buffers,
                  const std::vector<AllocRule>& rules, AllocResult* result,
                  AllocFailure* failure, int64_t floor = -1,
                  AllocOrder order = AllocOrder::kLifetime);

}  // namespace tilec::lower

#endif  // TILEC_PASSES_LOWER_ALLOCATE_H_
