// How data sits inside one tile's buffer, and the contiguous runs that move
// a box of a value between two such arrangements. Shared by the lowering
// (passes/lower), which builds buffers and copies from it, and the planner
// (passes/plan), which prices what the lowering will emit from it.
//
// A buffer holds one or more row-major boxes of a value ("segments"), one
// after another: a blocked ownership gives one segment (the tile's block), a
// flat ownership up to 2*rank-1 (its flat range cut into boxes, which are
// then contiguous in flat order), and a GEMM's staging buffer may be cut
// into K pieces (tile_plan.h). Everything here counts elements, not bytes.

#ifndef TILEC_PASSES_CORE_LAYOUT_H_
#define TILEC_PASSES_CORE_LAYOUT_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kernels/exchange_schedule.h"
#include "passes/core/ownership.h"

namespace tilec::passes {

// A balanced split of `extent` into `parts` contiguous blocks: the first
// extent % parts blocks are one larger (the ownership algebra's rule).
struct Split {
  int64_t extent = 0;
  int64_t parts = 1;
  int64_t Begin(int64_t i) const {
    const int64_t q = extent / parts, r = extent % parts;
    return i * q + std::min<int64_t>(i, r);
  }
  int64_t End(int64_t i) const { return Begin(i + 1); }
  int64_t Size(int64_t i) const { return End(i) - Begin(i); }
  int64_t Largest() const { return extent / parts + (extent % parts ? 1 : 0); }
  // The part that holds item x (0 <= x < extent).
  int64_t PartOf(int64_t x) const {
    const int64_t q = extent / parts, r = extent % parts;
    const int64_t big = r * (q + 1);
    return x < big ? x / (q + 1) : r + (x - big) / std::max<int64_t>(q, 1);
  }
  friend bool operator==(const Split&, const Split&) = default;
};

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

// `count` consecutive runs of `elements` elements each.
struct RunGroup {
  int64_t count = 0;
  int64_t elements = 0;
  friend bool operator==(const RunGroup&, const RunGroup&) = default;
};

// The runs MoveRuns lists, counted without listing them (O(segments^2), not
// O(rows)): their sizes in MoveRuns' order as groups of equal neighbours.
// A piece of the box inside one source and one destination segment is one
// run where it spans both segments' full extent on every axis below its
// outermost varying one, else one run per row (per row of the smallest
// sub-box that is contiguous on both sides); runs of neighbouring pieces
// merge where contiguous on both sides, as in MoveRuns. Same return value.
bool CountRuns(const Box& box, const Segments& src, const Segments& dst,
               std::vector<RunGroup>* groups);

// True when `result` holds its boxes back to back (one contiguous range of
// elements) and every operand holds the same boxes at the same offsets
// relative to its first: a computation that treats every element alike
// (no rows: no per-column operand, no row statistics) can then run once
// over the whole range. Elementwise lowering and its price both use it.
bool SameContiguousRange(const Segments& result,
                         std::span<const Segments> operands);

// The runs (src = dst = the element offset in `segments`) that cover `box`:
// where a kernel finds it. False when not every element is held.
bool LocateRuns(const Box& box, const Segments& segments,
                std::vector<Run>* runs);

// The element offset of `box` if it occupies one contiguous run of
// `segments`, in row-major order.
std::optional<int64_t> ContiguousOffset(const Box& box,
                                        const Segments& segments);

std::string SegmentsText(const Segments& segments);

// ---------------------------------------------------------------- exchange
// A tile's storage on one side of a move: `source` true for the sending
// tile, false for a receiving one.
using StorageOf = std::function<const Segments&(int tile, bool source)>;

// The storage an ownership gives each tile (its held boxes back to back),
// computed once per tile.
class OwnershipStorage {
 public:
  OwnershipStorage(const fb::OwnershipT& ownership,
                   std::span<const int64_t> shape, const Box* view = nullptr)
      : ownership_(ownership), shape_(shape.begin(), shape.end()),
        view_(view ? std::optional<Box>(*view) : std::nullopt) {}
  const Segments& Of(int tile);

 private:
  const fb::OwnershipT& ownership_;
  std::vector<int64_t> shape_;
  std::optional<Box> view_;
  std::map<int, Segments> held_;
};

// One piece per run of `groups` (each run `elements` elements of
// `element_bytes`, as its storage keeps it word aligned), numbered from row
// 0 of `transfer`, into `traffic`.
void AddRunPieces(std::span<const RunGroup> groups, int element_bytes,
                  int sender, std::span<const int> receivers,
                  uint32_t transfer, kernels::PhaseTraffic* traffic);

// The exchange phase that moves `transfers` as the lowering does
// (kernels/exchange_schedule.h): each transfer's box in the runs CountRuns
// counts between the sender's storage and its first receiver's, each run
// one piece of whole words to every receiver (with `unicast`: to each
// receiver alone, in the runs between the sender's storage and that
// receiver's).
kernels::PhaseTraffic TrafficOfTransfers(std::span<const Transfer> transfers,
                                         int element_bytes,
                                         const fb::TargetT& target,
                                         const StorageOf& storage,
                                         bool unicast = false);

// How TimeExchange times a phase: by the schedule emit-device would make
// (the planner's price), or by the endpoint bound, which no schedule beats
// (a lower bound, with which the planner skips candidates that cannot win
// before it schedules them).
enum class PhaseTiming { kScheduled, kLowerBound };

// Times `cost`'s exchange phase as emit-device would schedule `traffic`
// (kernels::PlannedPhaseLength): scheduled_cycles, and phase_cycles = that
// + sync (0 without traffic); and its exchange tables per tile (tile_code)
// and on its busiest tile (code_bytes). The one price of an exchange phase
// in the planner.
void TimeExchange(const kernels::PhaseTraffic& traffic,
                  const fb::TargetT& target, TransferCost* cost,
                  PhaseTiming timing = PhaseTiming::kScheduled);

// CostOfPlan(PlanTransfers(source, destination, ...)) with its phase timed
// (TimeExchange), each tile storing its blocks as the ownership holds them.
TransferCost RedistributionCost(const fb::OwnershipT& source,
                                const fb::OwnershipT& destination,
                                std::span<const int64_t> shape,
                                int element_bytes, const fb::TargetT& target,
                                const Box* destination_view = nullptr,
                                PhaseTiming timing = PhaseTiming::kScheduled);

// A Redistribute op's cost: RedistributionCost (scheduled), or where some
// multicast's sender also receives (SendersReceiveMulticasts) and it is
// shorter, the cost of the same transfers sent as unicasts, with `unicast`
// set (the op's recipe then says `unicast`, and the lowering sends each
// piece to each destination alone). The one choice between the forms, the
// planner's, which the lowering follows. A GEMM's or an attention op's
// operand delivery stays multicast (RedistributionCost).
TransferCost RedistributeOpCost(const fb::OwnershipT& source,
                                const fb::OwnershipT& destination,
                                std::span<const int64_t> shape,
                                int element_bytes, const fb::TargetT& target);

}  // namespace tilec::passes

#endif  // TILEC_PASSES_CORE_LAYOUT_H_
