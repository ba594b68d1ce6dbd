// How data sits inside one tile's buffer, and the contiguous runs that move
// a box of a value between two such arrangements. Shared by the lowering
// (passes/lower), which builds buffers and copies from it, and the planner
// (passes/plan), which prices what the lowering will emit from it.
//
// A buffer holds one or more row-major boxes of a value ("segments"), one
// after another: a blocked ownership gives one segment (the tile's block), a
// flat ownership up to 2*rank-1 (its flat range cut into boxes, which are
// then contiguous in flat order), and the lowering may choose several
// column pieces for a GEMM weight or partial (see lowering.h). Everything
// here counts elements, not bytes.

#ifndef TILEC_PASSES_CORE_LAYOUT_H_
#define TILEC_PASSES_CORE_LAYOUT_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "passes/core/ownership.h"

namespace tilec::passes {

// A row-major box stored at `offset` elements from the buffer's start.
struct Segment {
  Box box;
  int64_t offset = 0;
  friend bool operator==(const Segment&, const Segment&) = default;
};
using Segments = std::vector<Segment>;

// Boxes laid out one after another from offset 0.
Segments Consecutive(std::span<const Box> boxes);
// The same, each box starting at a multiple of `alignment` bytes
// (elements of `element_bytes`): pieces that kernels address separately.
Segments AlignedPieces(std::span<const Box> boxes, int element_bytes,
                       int alignment);
int64_t TotalElements(const Segments& segments);
// Elements a buffer needs for `segments` (gaps included).
int64_t Extent(const Segments& segments);

// The whole-value box of `shape`.
Box FullBox(std::span<const int64_t> shape);
// a ∩ b (empty box of the same rank when they do not meet).
Box IntersectBoxes(const Box& a, const Box& b);
bool ContainsBox(const Box& outer, const Box& inner);
// Number of rows (elements / last-axis extent) and the last-axis extent.
int64_t BoxRows(const Box& box);
int64_t BoxWidth(const Box& box);

// A contiguous run of `count` elements from element `src` of one buffer to
// element `dst` of another.
struct Run {
  int64_t src = 0;
  int64_t dst = 0;
  int64_t count = 0;
  friend bool operator==(const Run&, const Run&) = default;
};

// The runs that move every element of `box` from the `src` arrangement to
// the `dst` one, in row-major order of the box, with neighbouring rows
// merged into one run where they are contiguous on both sides. Returns
// false when some element of the box is missing on either side.
bool MoveRuns(const Box& box, const Segments& src, const Segments& dst,
              std::vector<Run>* runs);

// The runs (src = dst = the element offset in `segments`) that cover `box`:
// where a kernel finds it. False when not every element is held.
bool LocateRuns(const Box& box, const Segments& segments,
                std::vector<Run>* runs);

// The element offset of `box` if it occupies one contiguous run of
// `segments`, in row-major order.
std::optional<int64_t> ContiguousOffset(const Box& box,
                                        const Segments& segments);

std::string SegmentsText(const Segments& segments);

}  // namespace tilec::passes

#endif  // TILEC_PASSES_CORE_LAYOUT_H_
