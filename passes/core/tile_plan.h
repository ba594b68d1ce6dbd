// What the lowering emits on each tile of a GEMM, as pure functions of the
// recipe and of how the operands are stored: the grid and its blocks, the
// output ranges of a K-split reduction, the column pieces of a partial, and
// per grid tile the K pieces of its staged panel, its GEMM calls and its
// local copies with their cycles. The lowering (passes/lower) builds buffers
// and calls from these decisions; the planner (passes/plan) prices recipes
// with the same functions, so that both follow one definition
// (docs/lowering.md, docs/planner.md).

#ifndef TILEC_PASSES_CORE_TILE_PLAN_H_
#define TILEC_PASSES_CORE_TILE_PLAN_H_

#include <cstdint>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "kernels/cost.h"
#include "kernels/numerics.h"
#include "passes/core/layout.h"
#include "passes/core/ownership.h"

namespace tilec::passes {

// The tile grid of a GEMM recipe [M,K] x [K,N] over m x k x n
// (docs/planning.md): grid position (mi, ni, ki) runs on tile
// first + ((mi*n + ni)*k + ki) * stride.
struct GemmGrid {
  int64_t M = 0, K = 0, N = 0;
  int m = 1, k = 1, n = 1;
  int first = 0, stride = 1;
  Split rows, depth, cols;
  // Columns of K per staged exchange phase (the whole block for Complete).
  int64_t phase_k = 0;
  bool staged = false;  // Streamed or Batched

  int Tile(int mi, int ni, int ki) const {
    return first + ((mi * n + ni) * k + ki) * stride;
  }
  Box ABox(int mi, int ki) const;
  Box BBox(int ki, int ni) const;
  Box CBox(int mi, int ni) const;
  // The ownership the left operand needs: blocked(m x k, rep=n,
  // order=0,2,1) on the grid's tiles.
  fb::OwnershipT ANeeded() const;
  // Staged exchange phases of a tile with depth part ki.
  int Chunks(int ki) const;
};

// The grid of a recipe on [M,K] x [K,N]; chunk_k and batch_chunks only
// matter for Streamed and Batched staging.
GemmGrid MakeGemmGrid(int64_t M, int64_t K, int64_t N, int m, int k, int n,
                      int first, int stride, fb::Staging staging, int chunk_k,
                      int batch_chunks);

// One output range of a K-split reduction: the part of a result tile's box
// that lies in one GEMM output block.
struct ReduceRange {
  int tile = 0;  // the result tile that reduces it
  Box box;       // inside the result tile's box and inside block (mi, ni)
  int mi = 0, ni = 0;
  int seed_ki = -1;  // ki of the partial already on `tile`, -1 if none
};

// Every output range of a GEMM with k > 1 whose result [M, N] is owned
// `result` (result tiles ascending, boxes in row-major order).
std::vector<ReduceRange> GemmRanges(const GemmGrid& grid,
                                    const fb::OwnershipT& result,
                                    std::span<const int64_t> result_shape);

// True if some range's seed is a column sub-range (strided) of its block's
// partial: reading it in place then needs split partials.
bool StridedSeeds(const GemmGrid& grid, std::span<const ReduceRange> ranges);

// Output column pieces [c0, c1) of grid tile (mi, ni, ki) in "split
// partials" mode: block ni's columns cut where the ranges that the tile
// reduces itself (its seeds, `seeds`) begin and end, so that each seed is one
// piece of the partial.
std::vector<std::pair<int64_t, int64_t>> SeedColumnPieces(
    const GemmGrid& grid, int ni, std::span<const Box> seeds);
// The same into *pieces (reusing its memory).
void SeedColumnPieces(const GemmGrid& grid, int ni, std::span<const Box> seeds,
                      std::vector<std::pair<int64_t, int64_t>>* pieces);
// The whole block's columns: one piece.
std::vector<std::pair<int64_t, int64_t>> BlockColumns(const GemmGrid& grid,
                                                     int ni);

// The F32 partial (or accumulator) of grid row block mi stored as one
// aligned piece per column piece.
Segments PartialSegments(const GemmGrid& grid, int mi,
                         std::span<const std::pair<int64_t, int64_t>> columns,
                         int alignment);
// The same into *segments (reusing its memory).
void PartialSegments(const GemmGrid& grid, int mi,
                     std::span<const std::pair<int64_t, int64_t>> columns,
                     int alignment, Segments* segments);

// ---------------------------------------------------------------- copies

// Cycles of the local copies the lowering emits to move a box between two
// arrangements on one tile: one `copy` call per run (CountRuns), each
// charged the target's copy formula. Memoized by run size.
class CopyPricer {
 public:
  explicit CopyPricer(const kernels::CostModel& model) : model_(model) {}
  // Adds the runs to *runs if not null. An internal error if the box is
  // not held on both sides.
  StatusOr<int64_t> Cycles(const Box& box, const Segments& src,
                           const Segments& dst, int element_bytes,
                           int64_t* runs = nullptr);

 private:
  kernels::CostModel model_;
  std::unordered_map<int64_t, int64_t> cache_;  // bytes -> cycles
  std::vector<RunGroup> groups_;
};

// ---------------------------------------------------------------- one tile

struct GemmTileInput {
  int mi = 0, ni = 0, ki = 0;
  // How the tile stores A, null if it holds none of it.
  const Segments* a_storage = nullptr;
  // The boxes of A the tile copies locally into its panel (PlanTransfers'
  // local copies for this tile, ForEachLocalCopy).
  std::span<const Box> local;
  // The output column pieces (BlockColumns or SeedColumnPieces).
  std::span<const std::pair<int64_t, int64_t>> columns;
  // Use A in place where the tile holds its whole panel contiguously.
  bool alias_in_place = true;
  // K pieces allowed (LoweringOptions::k_pieces, and the calls accumulate in
  // F32: never when they write an F16 output directly).
  bool k_pieces = false;
};

// One staged chunk (exchange phase) of a tile's panel.
struct GemmChunkPlan {
  Box span;                   // rows x K columns of the chunk
  std::vector<int64_t> cuts;  // K boundaries of its pieces, front to back
  int64_t gemm_cycles = 0;    // its GEMM calls (K pieces x column pieces)
  int64_t calls = 0;
  int64_t copy_cycles = 0;    // its local copies
  int64_t copy_runs = 0;
  // The same chunk as one panel (what it costs when K pieces are off).
  int64_t whole_gemm_cycles = 0;
  int64_t whole_copy_cycles = 0;
};

struct GemmTilePlan {
  // Uses A where it lies: one chunk (the whole panel), no copies, and its
  // calls run in the first GEMM phase.
  bool aliased = false;
  bool k_pieced = false;  // the chunks are cut into K pieces
  std::vector<GemmChunkPlan> chunks;
};

// What a tile's panel looks like before its calls are chosen: whether it
// uses A in place, and per chunk the K cuts where its local parts meet A's
// stored segments and the cycles of its local copies both ways (into the
// whole chunk, into the chunk cut into K pieces).
struct GemmTileGeometry {
  bool aliased = false;
  bool local = false;  // some chunk has a local part
  struct Chunk {
    Box span;
    std::vector<int64_t> cuts;  // front = span begin, back = span end
    bool local = false;         // the tile copies part of this chunk
    int64_t whole_copy_cycles = 0, whole_copy_runs = 0;
    int64_t piece_copy_cycles = 0, piece_copy_runs = 0;
  };
  std::vector<Chunk> chunks;
};

// Plans grid tiles of one GEMM (docs/lowering.md):
// a tile that holds its whole panel contiguously uses it in place;
// otherwise its K block is cut into chunks of phase_k columns, and, where
// K pieces are allowed and cheaper on this tile than one panel per chunk,
// each chunk is cut into K pieces where the tile's local part of A meets
// the segments A is stored in (so each stored piece arrives with one copy
// instead of one copy per row). Kernel cycles are memoized.
class GemmTilePlanner {
 public:
  GemmTilePlanner(const GemmGrid& grid, const kernels::CostModel& model,
                  kernels::DType a_dtype, int a_element_bytes, int alignment);

  StatusOr<GemmTilePlan> Plan(const GemmTileInput& in);
  // The same in two steps: the geometry does not depend on in.columns or
  // in.k_pieces, so variants of those can share it.
  StatusOr<GemmTileGeometry> Geometry(const GemmTileInput& in);
  Status Geometry(const GemmTileInput& in, GemmTileGeometry* geometry);
  StatusOr<GemmTilePlan> Plan(const GemmTileGeometry& geometry,
                              const GemmTileInput& in);
  // The same into *plan, reusing its memory (for pricing many tiles).
  Status Plan(const GemmTileGeometry& geometry, const GemmTileInput& in,
              GemmTilePlan* plan);

  // Cycles of one GEMM call [m, k] x [k, n] and of the calls of one K piece
  // of width k over `columns`.
  StatusOr<int64_t> Gemm(int64_t m, int64_t k, int64_t n);
  StatusOr<int64_t> PieceCycles(
      int64_t m, int64_t k,
      std::span<const std::pair<int64_t, int64_t>> columns);
  // Cycles of the copy calls that move `box` from `src` to `dst` (one per
  // run, MoveRuns), elements of `element_bytes`; runs in *runs if not null.
  StatusOr<int64_t> CopyCycles(const Box& box, const Segments& src,
                               const Segments& dst, int element_bytes,
                               int64_t* runs = nullptr);

  const GemmGrid& grid() const { return grid_; }

 private:
  GemmGrid grid_;
  kernels::CostModel model_;
  kernels::DType a_dtype_;
  int a_element_bytes_ = 1;
  int alignment_ = 8;
  // Kernel cycles by (m, k, n): a direct-mapped table (the planner asks for
  // the same few shapes on every tile).
  struct GemmEntry {
    uint64_t key = ~uint64_t{0};
    int64_t cycles = 0;
  };
  std::vector<GemmEntry> gemm_cache_;
  CopyPricer copies_;
  // Scratch of Geometry.
  std::vector<Box> parts_, piece_boxes_;
  Segments whole_, cut_;
};

}  // namespace tilec::passes

#endif  // TILEC_PASSES_CORE_TILE_PLAN_H_
