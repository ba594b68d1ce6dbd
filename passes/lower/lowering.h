// The lowering core shared by expand-reduce, emit-device and
// inspect-exchanges: turns one planned op (docs/planning.md) into an
// OpProgram (program.h) over virtual buffers, following the op's recipe and
// the reduction choices that expand-reduce recorded (docs/lowering.md).
//
// Value storage. A value's part on a tile lives in one virtual buffer as the
// row-major boxes its ownership gives the tile (layout.h), so producers and
// consumers agree without talking to each other. The only exception is a
// GEMM weight in "split partial" mode, which the host places as column
// pieces (see ReductionChoice). Graph inputs and weights get their buffers
// lazily, when their first consumer is lowered.
//
// GEMM. Grid position (mi, ni, ki) runs on tile first + ((mi*n + ni)*k +
// ki) * stride and computes rows mi, columns ni, depth ki. The left operand
// is delivered per the recipe's staging: Complete (one panel), Streamed or
// Batched(N) (chunks of chunk_k or N*chunk_k columns of K per exchange
// phase, two alternating buffers), with a tile that already holds its whole
// panel contiguously using it in place. With k > 1 the F32 partials are
// reduced per "output range": the part of a result tile's box that lies in
// one GEMM output block. Partials are summed in ki order (reduce_partials),
// so every variant gives bit-identical results.
//
// Elementwise and row-wise ops run where their result lives; fused bodies
// become kernel sequences with F32 temporaries (exact: the reference does
// not round inside a body except at a Cast). LayerNorm over split columns
// and Moments become partial moments, an exchange and Chan combination.

#ifndef TILEC_PASSES_LOWER_LOWERING_H_
#define TILEC_PASSES_LOWER_LOWERING_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "formats/basics.h"
#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "kernels/cost.h"
#include "passes/core/attention_plan.h"
#include "passes/core/split_row_plan.h"
#include "passes/core/tile_plan.h"
#include "passes/lower/layout.h"
#include "passes/lower/program.h"
#include "passes/lower/transfers.h"

namespace tilec::lower {


// A value's part on one tile.
struct Storage {
  int buffer = -1;
  Segments segments;
};

// What expand-reduce decided for one reduction (stored in
// Operation.reduction; see ChoiceFromReduction).
struct ReductionChoice {
  // The dtype a K-split GEMM's partials are written and exchanged in
  // (passes::PartialsDType: F32, or the result's 16-bit dtype).
  fb::DType partials = fb::DType::F32;
  // Remote partials per exchange phase; 0 = all in one phase.
  int partials_per_epoch = 0;
};

ReductionChoice ChoiceFromReduction(const fb::ReductionT* reduction);

// The grid and its blocks are shared with the planner
// (passes/core/tile_plan.h).
using passes::GemmGrid;
using passes::Split;

// Reads the grid from op.recipe; a one-line error naming the op if the
// recipe or the operand shapes do not fit docs/planning.md.
StatusOr<GemmGrid> ReadGemmGrid(const fb::ModuleT& module,
                                const fb::OperationT& op);

// An op the host runs as it writes a graph input (recipe Host: Patchify of
// an image, docs/import-onnx.md): it has no device work, its result's
// buffers are written by the host, and emit-device binds the input to them
// with the transform (HostBinding.patch).
bool IsHostOp(const fb::OperationT& op);

// BadInput naming the first value without an ownership ("run plan-ownership
// first"), except graph inputs no device op reads (an image the host
// patchifies as it writes it): those never reach the device.
Status CheckPlanned(const fb::ModuleT& module);

struct LoweringOptions {
  // A tile that already holds exactly the data an op needs, contiguously,
  // uses that buffer instead of a copy (left-operand staging,
  // redistributions).
  bool alias_in_place = true;
  // Pricing one op alone: operands without storage (activations whose
  // producer was not lowered) get their natural storage as if placed by the
  // host.
  bool assume_operands = false;
  // A staged GEMM tile that copies part of its left operand from its own
  // memory may cut its staging buffer into K pieces at that part's columns
  // (one GEMM call per piece) when that makes the copy cheaper than the
  // extra calls cost on that tile. Off by default: emit-device prices each
  // GEMM both ways and switches it on where the op gains.
  bool k_pieces = false;
};

// What the lowering of one op did, for the pass logs.
struct OpNotes {
  int tiles = 0;
  int aliased_tiles = 0;        // staging or redistribution used in place
  int staged_tiles = 0;         // tiles that received a staged operand
  int stage_phases = 0;         // exchange phases of operand staging
  int64_t stage_bytes_per_tile = 0;  // staging buffers on the busiest tile
  int ranges = 0;          // tiles that reduce rows
  int seeds_in_place = 0;
  int direct_writes = 0;
  int reduce_epochs = 0;  // per serial step
  int steps = 1;          // GEMM: serial row steps
  bool interleaved_steps = false;  // each step every reducer's j-th part
  std::string partials;    // K-split GEMM: the partials' dtype
  std::string converter;        // k=1 staged GEMM: accumulator -> output
  int64_t local_copy_runs = 0;
  int gathers = 0;  // operands gathered into a contiguous temporary
  int k_pieced_tiles = 0;  // staged panels cut where local boxes lie
  int moment_partials = 0;  // row statistics combined from column slices
  int whole_range_tiles = 0;  // elementwise calls over a flat tile's range
};

class Lowering {
 public:
  // `module` must outlive the Lowering.
  Lowering(const fb::ModuleT& module, const kernels::CostModel& model,
           LoweringOptions options = {});

  // Lowers `op` with the reduction choice stored in the op (defaults when it
  // has none). Ops must be lowered in program order (operands first).
  StatusOr<OpProgram> Lower(const fb::OperationT& op);
  StatusOr<OpProgram> Lower(const fb::OperationT& op,
                            const ReductionChoice& choice);
  // The same with in-place use of operands switched on or off for this op.
  StatusOr<OpProgram> Lower(const fb::OperationT& op,
                            const ReductionChoice& choice, bool alias_in_place,
                            bool k_pieces = false);

  // Tiles where lowering `op` now would use an operand in place (a GEMM's
  // left operand or a redistribution's source): operands must be lowered.
  StatusOr<int> AliasableTiles(const fb::OperationT& op);

  const std::vector<VBuffer>& buffers() const { return buffers_; }
  const std::vector<ElementRule>& rules() const { return rules_; }
  const OpNotes& notes(uint32_t op) { return notes_[op]; }
  // Storage of `value` on `tile`, nullptr if none.
  const Storage* Find(uint32_t value, int tile) const;
  // Tiles with storage of `value`, ascending.
  std::vector<int> TilesOf(uint32_t value) const;
  // When `value` gets storage on a tile where `home` is stored alike, it
  // takes home's buffer: a repeat's carried_out written over carried_in,
  // which the next iteration reads (docs/repeat.md). Call before `value`'s
  // producer is lowered.
  void StoreIn(uint32_t value, uint32_t home) { store_in_[value] = home; }
  // Stores `value`, which no op reads, exactly as `like` is stored: a copy
  // of each of like's buffers with value's id, scale and name (a repeat's
  // twin weight, docs/repeat.md). Returns like's buffer -> its copy.
  std::map<int, int> StoreLike(uint32_t value, uint32_t like);
  const fb::ValueT* value(uint32_t id) const;
  int tiles() const { return tiles_; }
  const kernels::CostModel& model() const { return model_; }

  // Bytes of the op's scratch (every buffer it created except result
  // values) on its busiest tile.
  int64_t ScratchBytesPerTile(uint32_t op) const;

 private:
  StatusOr<const Storage*> Operand(uint32_t value, int tile, uint32_t op);
  Storage* NewValueStorage(uint32_t value, int tile, uint32_t op,
                           BufferKind kind, const Segments* segments,
                           bool interleaved);
  int NewBuffer(int tile, int64_t elements, fb::DType dtype, int scale_exp,
                int64_t value, uint32_t op, BufferKind kind,
                const std::string& name, bool interleaved);

  struct GemmState;  // one GEMM being lowered
  Status LowerGemm(const fb::OperationT& op, const ReductionChoice& choice,
                   OpProgram* out);
  Status StartGemm(const fb::OperationT& op, const ReductionChoice& choice,
                   GemmState* s);
  Status StartGemmStep(int step, GemmState* s);
  Status PlanGemmTiles(GemmState* s);
  Status PlaceGemmOutput(GemmState* s, int mi, int ki, int ni, Storage* out);
  Status AddGemmCalls(const GemmState& s, int t, int ni, const Storage& b_store,
                      const Storage& a_store, bool accumulate, Phase* phase);
  StatusOr<int64_t> StageGemmChunks(GemmState* s, int tile, int mi,
                                    const passes::GemmTilePlan& plan);
  Status DeliverLeftOperand(GemmState* s);
  Status ConvertAccumulators(GemmState* s);
  Status ReducePartials(GemmState* s);
  Status ReduceTileRows(GemmState* s, int mi, int ki, int ni,
                        const std::vector<std::vector<int>>& groups,
                        const std::vector<Phase*>& rx,
                        const std::vector<Phase*>& rc);
  Status LowerElementwise(const fb::OperationT& op, OpProgram* out);
  struct ElementwiseState;  // one elementwise op being lowered
  Status StartElementwise(const fb::OperationT& op, ElementwiseState* s);
  Status LowerElementwiseTile(ElementwiseState* s, int tile);
  StatusOr<std::map<uint32_t, VSlice>> WholeRanges(const ElementwiseState& s);
  VSlice MomentsSlice(ElementwiseState* s, const Box& rows);
  Status ElementwiseCalls(ElementwiseState* s, const Segment& unit);
  Status LowerRowWise(const fb::OperationT& op, OpProgram* out);
  Status LowerSplitLayerNorm(const fb::OperationT& op, OpProgram* out);
  struct LayerNormSlice {  // a tile's column slice of a split LayerNorm
    int tile;
    Box box;
    int partial;  // buffer of its partial moments
  };
  // The partial moments of `box` of the op's operand 0 on `tile`: one
  // ln_moments call in `phase` into a new F32 [rows, 3] buffer, returned.
  StatusOr<int> PartialMoments(const fb::OperationT& op, int tile,
                               const Box& box, std::string_view role,
                               Phase* phase);
  Status SplitMomentPartials(const fb::OperationT& op,
                             const passes::SplitRowPlan& plan, Phase* stats,
                             std::vector<LayerNormSlice>* slices);
  StatusOr<int> CombineRowGroup(const fb::OperationT& op,
                                const std::vector<LayerNormSlice>& slices,
                                int s, const std::vector<int>& group,
                                Phase* exchange, Phase* norm);
  Status NormalizeSlice(const fb::OperationT& op, const LayerNormSlice& s,
                        int full, Phase* norm);
  Status LowerMoments(const fb::OperationT& op, const ReductionChoice& choice,
                      OpProgram* out);
  Status LowerNormalize(const fb::OperationT& op, OpProgram* out);
  Status LowerRedistribute(const fb::OperationT& op, OpProgram* out);
  Status LowerCopyRows(const fb::OperationT& op, OpProgram* out);
  Status LowerAttention(const fb::OperationT& op, OpProgram* out);
  Status LowerHostOp(const fb::OperationT& op);
  bool CanUseInPlace(const Storage& a) const;
  Status AttentionCall(const fb::OperationT& op, const passes::AttentionGrid& g,
                       int64_t b, int64_t h, int mi, int ni, int t,
                       const std::vector<Storage>& staged, Phase* calls);
  // Row statistics computed as partial moments on column slices: the
  // partial of each tile (rows box, F32 [rows, 3] storage) combined (Chan,
  // in column order) into `m_id`'s storage on its owners. `compute` holds
  // the calls that wrote the partials; the exchange and combine phases are
  // appended to `list`.
  struct MomentPartial {
    int tile = 0;
    Box rows;  // [r0, r1) x [c0, c1) of the data it summarizes
    Storage storage;
  };
  Status CombineMoments(const fb::OperationT& op, uint32_t m_id,
                        const std::vector<MomentPartial>& partials,
                        std::deque<Phase>* list);

  // Moves `box` of a value from (src_tile, src) to (dst_tile, dst): copy
  // calls into `copies` when the tiles are the same, else transfers into
  // `exchange` (merged into multicasts with identical sources).
  Status Move(const Box& box, int src_tile, const Storage& src, int dst_tile,
              const Storage& dst, fb::DType dtype, uint32_t op,
              Phase* copies, Phase* exchange);
  void AddCall(Phase* phase, VCall call);
  // `box` of `value` on `tile` as one contiguous slice: where it lies, or
  // gathered into a temporary by copies added to `phase` (before the
  // caller's kernel). A BadInput error (naming `role`) if the tile does not
  // hold it.
  StatusOr<VSlice> Contiguous(uint32_t value, int tile, const Box& box,
                              const fb::OperationT& op, std::string_view role,
                              Phase* phase);

  // A pointer, not a reference: emit-device replaces its lowering with a
  // priced copy.
  const fb::ModuleT* module_;
  kernels::CostModel model_;
  LoweringOptions options_;
  int tiles_ = 0;
  std::map<uint32_t, const fb::ValueT*> values_;
  std::map<uint32_t, const fb::OperationT*> producer_;  // by result value
  std::map<uint32_t, std::vector<Storage>> storage_;
  std::map<uint32_t, uint32_t> store_in_;  // value -> value whose buffer    // value -> per tile
  std::vector<VBuffer> buffers_;
  std::vector<ElementRule> rules_;
  std::map<uint32_t, OpNotes> notes_;
  // Transfers of the op being lowered: strided, merged into multicasts.
  TransferBuilder transfers_;
};

}  // namespace tilec::lower

#endif  // TILEC_PASSES_LOWER_LOWERING_H_
