// The ownership algebra: which tiles hold which parts of a value, what two
// ownerships have in common, and which transfers turn one into the other.
//
// An ownership is an fb::OwnershipT (see the comment of table Ownership in
// formats/tilec.fbs for the contract). In short, for a row-major value of
// rank 1..4:
//   - Blocked: partitions[a] balanced contiguous parts along axis a (with
//     extent E over p parts the first E % p parts are one element larger);
//     the grid partitions[0] x ... x partitions[r-1] x replicas (grid axis r
//     is the replicas) is linearized in axis_order, slowest axis first
//     (empty: 0, 1, ..., r, i.e. row-major with replicas fastest), and grid
//     position i lives on tile first_tile + i * tile_stride. Every replica
//     holds the whole block. E.g. a GEMM's left operand
//     blocked(9x6, rep=27, order=0,2,1) puts its 6 K parts fastest.
//     With sub_partitions, each block of axis a is split again into
//     sub_partitions[a] balanced parts and the grid has 2r+1 axes (blocks,
//     parts within them, replicas): blocked(9x54, sub=3x1,
//     order=0,2,1,3,4) is a K-split GEMM's result, each output block's
//     rows shared out among the 3 tiles that reduce them.
//   - Flat: the row-major element order is cut into `grain`-element grains
//     (the last may be short); the grains are split over `tiles` tiles in
//     balanced contiguous blocks; block j lives on tile
//     first_tile + j * tile_stride.
// Because tile_stride >= 1, every tile holds at most one block: a box
// (blocked) or one contiguous range of flat indices (flat).
//
// Everything here is a pure function of its arguments. Functions other than
// ValidateOwnership and ParseOwnership expect valid input (validate first:
// they CHECK-fail on an invalid ownership, which is an internal error).

#ifndef TILEC_PASSES_CORE_OWNERSHIP_H_
#define TILEC_PASSES_CORE_OWNERSHIP_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/basics.h"
#include "formats/tilec_generated.h"

namespace tilec::passes {

using ir::kMaxRank;

// A rectangular set of indices: per axis the half-open range [begin, end).
// Axes at and beyond `rank` are zero so that == compares boxes exactly.
struct Box {
  int rank = 0;
  std::array<int64_t, kMaxRank> begin{};
  std::array<int64_t, kMaxRank> end{};

  int64_t Elements() const;
  bool Empty() const {
    if (rank == 0) return true;
    for (int a = 0; a < rank; ++a) {
      if (end[a] <= begin[a]) return true;
    }
    return false;
  }
  friend bool operator==(const Box&, const Box&) = default;
};

// "[0:81, 718:1436]".
std::string FormatBox(const Box& box);

// Convenience constructors. Box2: rows [r0, r1) x columns [c0, c1) of a
// rank-2 value (the canonical empty box if either range is empty).
Box Box2(int64_t r0, int64_t r1, int64_t c0, int64_t c1);
fb::OwnershipT BlockedOwnership(std::vector<int32_t> partitions,
                                int replicas = 1, int first_tile = 0,
                                int tile_stride = 1);
fb::OwnershipT FlatOwnership(int grain, int tiles, int first_tile = 0,
                             int tile_stride = 1);

// Same kind and same fields (the fields a kind does not use must be at their
// defaults in a valid ownership, so this is a structural equality). An
// explicit identity axis order equals the empty one.
bool SameOwnership(const fb::OwnershipT& a, const fb::OwnershipT& b);

// A weight's home (docs/planning.md, "Weight homes"): every element once,
// balanced over as many of `target_tiles` tiles as there are 8-byte grains
// (flat, grains of 8 / element_bytes elements, so each tile's part is whole
// 8-byte words), on tiles starting at `first_tile_hint` where the home fits
// before the last tile, else ending at the last tile (a hint spreads small
// weights over the chip instead of stacking them on tile 0).
fb::OwnershipT HomeOwnership(std::span<const int64_t> shape, int element_bytes,
                             int target_tiles, int first_tile_hint = 0);

// A weight's home shaped for delivery to `layout` (docs/planning.md,
// "Weight homes"), the blocked layout a consumer needs, with R replicas of
// each block: every block held once, cut along its first axis into `parts`
// slabs (parts divides R), slab s on the tile that holds replica
// first_replica + s * R / parts of the block in `layout` (so the slab is
// already where one consumer tile needs it, and a receiver gathers its block
// in `parts` contiguous pieces). Replicas vary fastest or slowest in
// `layout`'s grid; for the slowest, slab s takes replica first_replica + s
// (contiguous replica planes). first_replica is reduced modulo the choices
// it has. Nullopt for a flat layout, one with sub-partitions or another
// grid order, or parts not dividing R. parts == R == 1 gives `layout`.
std::optional<fb::OwnershipT> DeliveryHome(const fb::OwnershipT& layout,
                                           int parts, int first_replica = 0);

// A home for a blocked `layout` with one replica of each block (where a
// delivery home is the layout itself) that holds each block once, cut
// along its first axis into `parts` slabs on a run of blocks x parts tiles
// of `tiles`, block after block: a receiver gathers its block in `parts`
// contiguous pieces, and no tile holds more than a slab. The run starts at
// first_hint, reduced modulo the starts that fit. Nullopt for another
// layout, or where the run does not fit in `tiles`.
std::optional<fb::OwnershipT> SpreadHome(const fb::OwnershipT& layout,
                                         int parts, int tiles,
                                         int first_hint = 0);

// Grid positions (tiles assigned, empty blocks included): the product of
// the partitions, sub-partitions and replicas, or a flat layout's tiles.
int64_t GridCells(const fb::OwnershipT& ownership);

// The ownership of a [C] vector used along the rows of a rank-2 value in
// `layout` (a bias): every tile holds its block's columns. Flat layouts
// replicate the vector on every tile. Nullopt where the tiles of one
// column block are not one run of the layout's grid order (the vector's
// replicas could not be placed in a blocked ownership).
std::optional<fb::OwnershipT> ColumnVectorOwnership(const fb::OwnershipT& layout);

// The ownership of a [rows, 1] column used along each row of a rank-2
// value in `layout` (binary_col's operand): every tile holds the rows of
// its block, the layout's row blocks (and row parts) replicated over its
// column blocks (and column parts). Flat layouts, whose ranges cut rows
// anywhere, replicate the whole column on every tile. Nullopt where the
// tiles of one row block are not one run of the layout's grid order.
std::optional<fb::OwnershipT> RowColumnOwnership(const fb::OwnershipT& layout);

// Checks `ownership` against a value of `shape` on a target with
// `target_tiles` tiles. Returns "" if valid, else one sentence saying what is
// wrong. Rank 1..4, extents >= 0 (at most 2^56 elements); counts
// (partitions, replicas, grain, tiles, tile_stride) >= 1; first_tile >= 0;
// fields the kind does not use are at their defaults (so that the text form
// round-trips); axis_order empty or a permutation of the grid axes 0..rank
// (blocked only); every tile the ownership assigns (including tiles whose
// block is empty) < target_tiles.
std::string ValidateOwnership(const fb::OwnershipT& ownership,
                              std::span<const int64_t> shape, int target_tiles);

// ---------------------------------------------------------------- text form
// The text form of formats/ownership_text.h, e.g.
// "blocked(9x6, rep=27, order=0,2,1)" and "flat(grain=4, tiles=1472)".
// FormatOwnership is ir::OwnershipText, except that a kind outside the enum
// prints as "unknown(kind=N)".
std::string FormatOwnership(const fb::OwnershipT& ownership);

// ir::ParseOwnershipText: syntax and shape-independent ranges only (call
// ValidateOwnership for a shape and a target).
std::optional<fb::OwnershipT> ParseOwnership(std::string_view text,
                                             std::string* error = nullptr);

// ---------------------------------------------------------------- queries
// The indices `tile` holds, in row-major order of their first element: one
// box for blocked, a flat range cut into at most 2*rank-1 boxes for flat.
// Empty if the tile holds nothing.
// With `view` (a sub-box of the value), `ownership` covers only that box
// and the boxes are the value's indices (see PlanTransfers).
std::vector<Box> HeldBoxes(const fb::OwnershipT& ownership,
                           std::span<const int64_t> shape, int tile,
                           const Box* view = nullptr);

// HeldBoxes of every tile that holds something, in one pass (the ownership
// is resolved once): fn(tile, boxes) with tiles ascending.
void ForEachHeldBoxes(
    const fb::OwnershipT& ownership, std::span<const int64_t> shape,
    const std::function<void(int tile, std::span<const Box> boxes)>& fn,
    const Box* view = nullptr);

// Number of elements `tile` holds (0 for a tile outside the ownership).
int64_t HeldElements(const fb::OwnershipT& ownership,
                     std::span<const int64_t> shape, int tile);

// Tiles that hold at least one element, ascending. Tiles whose block is
// empty (more parts than elements) are assigned but not used.
std::vector<int> TilesUsed(const fb::OwnershipT& ownership,
                           std::span<const int64_t> shape);

// The largest number of bytes that any one tile holds.
int64_t MaxBytesPerTile(const fb::OwnershipT& ownership,
                        std::span<const int64_t> shape, int element_bytes);

// Bytes held by each tile 0..num_tiles-1 (0 where nothing is held), in one
// pass: what memory accounting adds up per tile. Tiles the ownership assigns
// at or beyond num_tiles are ignored.
std::vector<int64_t> BytesPerTile(const fb::OwnershipT& ownership,
                                  std::span<const int64_t> shape,
                                  int element_bytes, int num_tiles);

// ---------------------------------------------------------------- intersection
// One box that tile `a_tile` holds under ownership A and `b_tile` holds
// under ownership B. A tile pair may have several entries (flat ranges cut
// into boxes, or several blocks); their boxes are disjoint.
struct Overlap {
  int a_tile = 0;
  int b_tile = 0;
  Box box;
  friend bool operator==(const Overlap&, const Overlap&) = default;
};

// Every non-empty overlap of A and B over a value of `shape`, sorted by
// (a_tile, b_tile, first element of the box). The output has an entry for
// every replica pair, so it can be large for heavily replicated ownerships;
// PlanTransfers does not go through it.
std::vector<Overlap> Intersect(const fb::OwnershipT& a, const fb::OwnershipT& b,
                               std::span<const int64_t> shape);

// ---------------------------------------------------------------- transfers
// One exchange transfer: `source_tile` sends `box` to every destination tile
// at once (a multicast: the sender pays for it once).
struct Transfer {
  int source_tile = 0;
  Box box;
  std::vector<int> destination_tiles;  // ascending, never the source
  int64_t elements = 0;
  int64_t bytes = 0;
};

// A tile copies `box` from its source buffer into its destination buffer.
struct LocalCopy {
  int tile = 0;
  Box box;
  int64_t elements = 0;
  int64_t bytes = 0;
};

struct TransferPlan {
  std::vector<Transfer> transfers;      // by (source_tile, box)
  std::vector<LocalCopy> local_copies;  // by (tile, box)
};

// The transfers that turn `source` into `destination` over a value of
// `shape` with `element_bytes`-byte elements. Every element a tile holds
// under `destination` arrives there exactly once: as a local copy if the
// tile already holds it under `source`, else in exactly one transfer from a
// tile that holds it under `source`. The boxes are the overlaps of a source
// block and a destination block (flat ranges cut into boxes), so each
// element is sent at most once in the whole plan, as one multicast to all
// destination replicas that lack it.
//
// Choice of source among replicas: the boxes are visited in a fixed order
// (blocked/blocked: row-major order of the boxes; otherwise flat blocks in
// tile order, then their boxes in row-major order) and each box is sent by
// the replica of its source block that has sent the fewest bytes so far in
// this plan (ties: fewest transfers sent so far, then the lowest replica
// index). This is deterministic and spreads the sending over the replicas by
// bytes, which is what the phase cost charges; receiving is not affected by
// the choice (every destination receives the box in any case).
//
// With `destination_view`, `destination` owns only that sub-box of the
// value (blocked, over the box's extent, its boxes naming the value's
// indices): how an op gathers a slice of a value, e.g. one head's columns
// of the fused qkv.
TransferPlan PlanTransfers(const fb::OwnershipT& source,
                           const fb::OwnershipT& destination,
                           std::span<const int64_t> shape, int element_bytes,
                           const Box* destination_view = nullptr);

// Whether sending `plan` as unicasts (each transfer to each destination
// alone) could shorten its phase: some multicast's sender also receives
// in it. A multicast holds all its receivers to one window at a time, so in
// an all-gather (each tile of a group holds a part every other one needs,
// as a weight's delivery home for a replicated layout does) the group's
// tiles take turns to send, and the phase takes R parts' time where the
// receive bound is R - 1 (docs/planning.md, "Unicast redistributions").
// Where no multicast sender receives, a multicast's receivers wait only
// for one another.
bool SendersReceiveMulticasts(const TransferPlan& plan);

// The local copies of PlanTransfers(source, destination, shape, ...) without
// the transfers: fn(tile, box) for exactly the boxes of plan.local_copies,
// in the same order (tiles ascending, then row-major). A tile copies the
// overlap of the source block it holds with the destination block it holds.
void ForEachLocalCopy(const fb::OwnershipT& source,
                      const fb::OwnershipT& destination,
                      std::span<const int64_t> shape,
                      const std::function<void(int tile, const Box& box)>& fn,
                      const Box* destination_view = nullptr);

// ---------------------------------------------------------------- costs
// What a plan moves, per tile: bytes sent (a multicast once) and received
// (in full at each receiver), transfers, and local copies, each box one call
// of the target's copy kernel formula on its tile. bound_cycles is the exchange phase's endpoint bound without
// sync (the largest of ceil(sent / rate), ceil(received / rate) and
// exchange_fragment_cycles * fragments over the tiles, each transfer one
// fragment at each end), which no schedule beats. The phase's price,
// phase_cycles, is its static schedule's length plus the sync residual
// (kernels/exchange_schedule.h): TimeExchange in layout.h sets it from the
// runs the lowering moves; without transfers there is no phase (0 cycles).
// Bytes of code per tile (exchange tables), shared: the planner caches
// and copies prices.
using TileCodeBytes = std::shared_ptr<const std::vector<int64_t>>;

// `a` + `b` per tile, and `extra` on every tile that has tables in `b`
// (null when both are).
TileCodeBytes AddTileCode(const TileCodeBytes& a, const TileCodeBytes& b,
                          int64_t extra = 0);
// The busiest tile's bytes (0 for null).
int64_t MaxTileCode(const TileCodeBytes& code);

struct TransferCost {
  int64_t phase_cycles = 0;           // scheduled + sync, 0 if no phase
  bool unicast = false;               // each transfer to each destination
                                      // alone (RedistributeOpCost)
  int64_t scheduled_cycles = 0;       // PlannedPhaseLength
  int64_t bound_cycles = 0;           // the endpoint bound, without sync
  // The exchange tables the phase adds to each tile's code (null: no
  // phase), and to its busiest tile's (set with the schedule, by
  // TimeExchange).
  TileCodeBytes tile_code;
  int64_t code_bytes = 0;
  int64_t local_copy_cycles = 0;      // the slowest tile's local copies
  int64_t transfers = 0;              // = fragments at senders
  int64_t bytes_sent = 0;             // summed over senders (multicast once)
  int64_t bytes_received = 0;         // summed over receivers
  int64_t local_copy_bytes = 0;       // summed over tiles
  int64_t max_bytes_sent = 0;         // by one tile
  int64_t max_bytes_received = 0;     // by one tile
  int64_t max_fragments = 0;          // at one tile, sent + received
  int exchange_bottleneck_tile = -1;  // the tile that sets bound_cycles
  int copy_bottleneck_tile = -1;      // the tile that sets local_copy_cycles

  // Exchange phase followed by the copies, when the copies run on their own.
  int64_t TotalCycles() const { return phase_cycles + local_copy_cycles; }
  friend bool operator==(const TransferCost&, const TransferCost&) = default;
};

// The cost of a plan; with `unicast`, of sending each transfer to each
// destination alone.
TransferCost CostOfPlan(const TransferPlan& plan, const fb::TargetT& target,
                        bool unicast = false);

// The same as CostOfPlan(PlanTransfers(...)) without building the plan.
TransferCost EstimateTransferCost(const fb::OwnershipT& source,
                                  const fb::OwnershipT& destination,
                                  std::span<const int64_t> shape,
                                  int element_bytes, const fb::TargetT& target,
                                  const Box* destination_view = nullptr);

// True if every tile holds exactly the same elements under both ownerships
// (e.g. blocked(4x1) and flat(grain=3, tiles=4) on shape [4, 3]): no
// redistribution is needed. PlanTransfers would still list local copies.
bool SamePlacement(const fb::OwnershipT& a, const fb::OwnershipT& b,
                   std::span<const int64_t> shape);

}  // namespace tilec::passes

#endif  // TILEC_PASSES_CORE_OWNERSHIP_H_
