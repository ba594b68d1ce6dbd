// The lowering's names for the shared storage helpers, which live in
// passes/core/layout.h so that the planner prices copies with the same
// definitions (segments, runs, contiguity) that the lowering emits them by.

#ifndef TILEC_PASSES_LOWER_LAYOUT_H_
#define TILEC_PASSES_LOWER_LAYOUT_H_

#include "passes/core/layout.h"

namespace tilec::lower {

using passes::AlignedPieces;
using passes::BoxRows;
using passes::BoxWidth;
using passes::ContainsBox;
using passes::ContiguousOffset;
using passes::Consecutive;
using passes::Extent;
using passes::FullBox;
using passes::IntersectBoxes;
using passes::LocateRuns;
using passes::MoveRuns;
using passes::Run;
using passes::Segment;
using passes::Segments;
using passes::SegmentsText;
using passes::TotalElements;
using passes::Box;

}  // namespace tilec::lower

#endif  // TILEC_PASSES_LOWER_LAYOUT_H_
