// What the lowering emits on each tile of a GEMM, as pure functions of the
// recipe and of how the operands are stored: the grid, its blocks and the
// rows each tile reduces, the partials' dtype, and per grid tile the K
// pieces of its staged panel, its GEMM calls (one per K piece over the
// whole block) and its local copies with their cycles. The lowering (passes/lower) builds buffers
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
// (docs/planning.md): grid position (mi, ki, ni) runs on tile
// first + ((mi*k + ki)*n + ni) * stride and computes rows mi, depth ki,
// columns ni. With k > 1 the k tiles of one output block hold its partial
// sums, and tile ki reduces the ki-th of k balanced parts of the block's
// rows (a contiguous run of every partial).
struct GemmGrid {
  int64_t M = 0, K = 0, N = 0;
  int m = 1, k = 1, n = 1;
  int first = 0, stride = 1;
  Split rows, depth, cols;
  // Columns of K per staged exchange phase (the whole block for Complete).
  int64_t phase_k = 0;
  bool staged = false;  // Streamed or Batched
  // Serial row steps: each tile computes block mi's rows in `steps`
  // parts, one after another (a block of fewer rows has empty trailing
  // steps). Contiguous steps cut the block into balanced runs; interleaved
  // ones (k > 1) take the j-th of `steps` balanced parts of every
  // reducer's rows, so that every reducer works in every step.
  int steps = 1;
  bool interleaved = false;

  int Tile(int mi, int ki, int ni) const {
    return first + ((mi * k + ki) * n + ni) * stride;
  }
  // The row runs [first, second) of block mi that step j computes, in the
  // order they are stacked in the step's panel and partial (empty runs
  // left out): one run for contiguous steps, up to k when interleaved.
  using RowRuns = std::vector<std::pair<int64_t, int64_t>>;
  RowRuns StepRuns(int mi, int step) const;
  void StepRuns(int mi, int step, RowRuns* runs) const;  // into *runs
  // The rows of block mi that step j computes (the runs' total).
  int64_t StepRowCount(int mi, int step) const;
  // Where row `row` (of one of step j's runs) lies in the step's panel.
  int64_t PanelRow(int mi, int step, int64_t row) const;
  // Columns [c0, c1) of step j's runs stacked one after another from
  // offset 0: the layout of its staged panel (K columns) and of its
  // partial (C columns).
  Segments StepPanel(int mi, int step, int64_t c0, int64_t c1) const;
  // The same cut into K pieces at `cuts`: each piece's runs stacked, the
  // pieces aligned to `alignment` bytes (with one run, AlignedPieces).
  Segments StepPanelPieces(int mi, int step, std::span<const int64_t> cuts,
                           int element_bytes, int alignment) const;
  // The same for given runs, into *out (reusing its memory).
  static void StepPanelPieces(const RowRuns& runs,
                              std::span<const int64_t> cuts, int element_bytes,
                              int alignment, Segments* out);
  // The most rows a step of block mi computes (what its panel and partial
  // buffers, reused by every step, hold): the first step's.
  int64_t MostStepRows(int mi) const { return StepRowCount(mi, 0); }
  Box ABox(int mi, int ki) const;
  // Step `step`'s part of ResultBox: the rows tile ki reduces lie in one
  // run of every step.
  Box StepResultBox(int mi, int ki, int ni, int step) const;
  // Interleaved: the rows of tile ki's part that step j takes.
  std::pair<int64_t, int64_t> ReducerStepRows(int mi, int ki,
                                              int step) const;
  // The most rows tile ki of block mi reduces in one step (what its
  // reduction buffers, reused by every step, hold).
  int64_t MostStepResultRows(int mi, int ki) const;
  Box BBox(int ki, int ni) const;
  Box CBox(int mi, int ni) const;
  // The rows of block mi that tile ki reduces: part ki of k.
  Split ReduceRows(int mi) const { return {rows.Size(mi), k}; }
  // The result box tile (mi, ki, ni) owns: all of C's block with k = 1,
  // its reduced rows with k > 1.
  Box ResultBox(int mi, int ki, int ni) const;
  // The ownership the left operand needs: blocked(m x k, rep=n).
  fb::OwnershipT ANeeded() const;
  // The right operand's: blocked(k x n, rep=m, order=2,0,1).
  fb::OwnershipT BNeeded() const;
  // The result's: blocked(m x n) for k = 1; for k > 1 blocked(m x n,
  // sub=k x 1, order=0,2,1,3,4), written as blocked(m*k x n) where that
  // splits the rows the same way.
  fb::OwnershipT ResultOwnership() const;
  // Staged exchange phases of a tile with depth part ki.
  int Chunks(int ki) const;
};

// The grid of a recipe on [M,K] x [K,N]; chunk_k and batch_chunks only
// matter for Streamed and Batched staging.
GemmGrid MakeGemmGrid(int64_t M, int64_t K, int64_t N, int m, int k, int n,
                      int first, int stride, fb::Staging staging, int chunk_k,
                      int batch_chunks, int steps = 1,
                      bool interleaved = false);

// The dtype a K-split GEMM's partial sums are kept and exchanged in. The
// result's own 16-bit dtype (half the exchange of F32) when every tile
// writes its partial with one call (Complete staging, no K pieces: a
// 16-bit partial is rounded once, like an output) and `allow_16bit`; else
// F32, the accumulator of several calls.
fb::DType PartialsDType(const GemmGrid& grid, fb::DType result,
                        bool allow_16bit);

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
  int step = 0;  // the serial row step whose rows are planned
  // How the tile stores A, null if it holds none of it.
  const Segments* a_storage = nullptr;
  // The boxes of A the tile copies locally into its panel (PlanTransfers'
  // local copies for this tile, ForEachLocalCopy).
  std::span<const Box> local;
  // Use A in place where the tile holds its whole panel contiguously.
  bool alias_in_place = true;
  // K pieces allowed (LoweringOptions::k_pieces, and the calls accumulate in
  // F32: never when they write an F16 output directly).
  bool k_pieces = false;
};

// One staged chunk (exchange phase) of a tile's panel.
struct GemmChunkPlan {
  Box span;  // rows x K columns of the chunk (of its row runs' bounds)
  std::vector<int64_t> cuts;  // K boundaries of its pieces, front to back
  int64_t gemm_cycles = 0;    // its GEMM calls (one per K piece)
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
// whole chunk, into the chunk cut into K pieces). The geometry does not
// depend on in.k_pieces, so both variants can share it.
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
  // The same in two steps: the geometry does not depend on in.k_pieces, so
  // both variants can share it.
  StatusOr<GemmTileGeometry> Geometry(const GemmTileInput& in);
  Status Geometry(const GemmTileInput& in, GemmTileGeometry* geometry);
  StatusOr<GemmTilePlan> Plan(const GemmTileGeometry& geometry,
                              const GemmTileInput& in);
  // The same into *plan, reusing its memory (for pricing many tiles).
  Status Plan(const GemmTileGeometry& geometry, const GemmTileInput& in,
              GemmTilePlan* plan);

  // Cycles of one GEMM call [m, k] x [k, n].
  StatusOr<int64_t> Gemm(int64_t m, int64_t k, int64_t n);
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
  std::vector<Box> parts_;
  GemmGrid::RowRuns runs_;
  Segments whole_, cut_;
};

}  // namespace tilec::passes

#endif  // TILEC_PASSES_CORE_TILE_PLAN_H_
