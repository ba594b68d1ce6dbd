// Lowering of GEMMs (lowering.h, "GEMM"): the grid, each tile's plan and
// staging of the left operand, accumulators and K-split partials.

#include "passes/lower/lowering.h"

#include <algorithm>

#include "formats/print.h"
#include "kernels/kernel_names.h"
#include "kernels/kernels.h"
#include "passes/core/ownership.h"
#include "passes/core/tile_plan.h"
#include "passes/lower/lowering_internal.h"

namespace tilec::lower {
namespace {

using passes::Box2;
using passes::HeldBoxes;

// The ki of each epoch's partials for the tile that reduces part seed_ki:
// at most per_epoch remote partials an epoch, in ki order, the seed in the
// epoch it falls in.
std::vector<std::vector<int>> EpochGroups(int k, int per_epoch, int seed_ki) {
  std::vector<std::vector<int>> groups;
  std::vector<int> cur;
  int remote = 0;
  for (int ki = 0; ki < k; ++ki) {
    cur.push_back(ki);
    if (ki != seed_ki && ++remote == per_epoch) {
      groups.push_back(cur);
      cur.clear();
      remote = 0;
    }
  }
  if (!cur.empty()) {
    const bool has_remote = std::any_of(
        cur.begin(), cur.end(), [&](int ki) { return ki != seed_ki; });
    if (!groups.empty() && !has_remote) {
      groups.back().insert(groups.back().end(), cur.begin(), cur.end());
    } else {
      groups.push_back(cur);
    }
  }
  return groups;
}

// The row runs of a staged chunk (GemmGrid::StepPanelPieces), each over
// the chunk's columns, in panel order: one box for contiguous steps.
std::vector<Box> RowRunSpans(const passes::Segments& chunk) {
  std::vector<Box> spans;
  const int64_t c0 = chunk.front().box.begin[1],
                c1 = chunk.back().box.end[1];
  for (const passes::Segment& s : chunk) {
    if (s.box.begin[1] != c0) break;  // the first piece has every run
    spans.push_back(Box2(s.box.begin[0], s.box.end[0], c0, c1));
  }
  return spans;
}

}  // namespace

// ---------------------------------------------------------------- GEMM grid

StatusOr<GemmGrid> ReadGemmGrid(const fb::ModuleT& module,
                                const fb::OperationT& op) {
  const std::string where = OpWhere(op);
  auto find = [&](uint32_t id) -> const fb::ValueT* {
    for (const auto& v : module.values) {
      if (v->id == id) return v.get();
    }
    return nullptr;
  };
  if (op.operands.size() != 2 || op.results.size() != 1) {
    return Status::BadInput(where + ": a GEMM needs 2 operands and 1 result");
  }
  const fb::ValueT* a = find(op.operands[0]);
  const fb::ValueT* b = find(op.operands[1]);
  const fb::ValueT* c = find(op.results[0]);
  if (!a || !b || !c || a->shape.size() != 2 || b->shape.size() != 2) {
    return Status::BadInput(where + ": operands must be [M,K] and [K,N]");
  }
  if (!op.recipe || op.recipe->kind != fb::RecipeKind::Gemm ||
      !op.recipe->layout) {
    return Status::BadInput(where +
                            ": has no gemm recipe with a tile grid layout "
                            "(run plan-ownership first)");
  }
  const fb::RecipeT& r = *op.recipe;
  const fb::OwnershipT& l = *r.layout;
  if (l.kind != fb::OwnershipKind::Blocked || l.partitions.size() != 3 ||
      l.replicas != 1 || !l.sub_partitions.empty()) {
    return Status::BadInput(where + ": recipe layout " +
                            ir::OwnershipText(l) +
                            " is not a blocked [m, k, n] grid "
                            "(docs/planning.md)");
  }
  GemmGrid g;
  g.M = a->shape[0];
  g.K = a->shape[1];
  g.N = b->shape[1];
  g.m = l.partitions[0];
  g.k = l.partitions[1];
  g.n = l.partitions[2];
  g.first = l.first_tile;
  g.stride = l.tile_stride;
  if (g.m != r.m_split || g.n != r.n_split || g.k != r.k_split) {
    return Status::BadInput(
        where + ": recipe splits m" + std::to_string(r.m_split) + " k" +
        std::to_string(r.k_split) + " n" + std::to_string(r.n_split) +
        " disagree with its grid layout " + ir::OwnershipText(l));
  }
  if (b->shape[0] != g.K || c->shape.size() != 2 || c->shape[0] != g.M ||
      c->shape[1] != g.N) {
    return Status::BadInput(where + ": shapes do not form [M,K] x [K,N]");
  }
  if (g.m > g.M || g.k > g.K || g.n > g.N) {
    return Status::BadInput(
        where + ": grid m" + std::to_string(g.m) + " k" + std::to_string(g.k) +
        " n" + std::to_string(g.n) + " has more parts than [M,K,N] = [" +
        std::to_string(g.M) + "," + std::to_string(g.K) + "," +
        std::to_string(g.N) + "]");
  }
  const int64_t last =
      g.first + (int64_t{g.m} * g.n * g.k - 1) * int64_t{g.stride};
  if (module.target && last >= module.target->tiles) {
    return Status::BadInput(where + ": grid uses tile " + std::to_string(last) +
                            " but the target has " +
                            std::to_string(module.target->tiles));
  }
  if (r.staging != fb::Staging::Complete && r.chunk_k < 1) {
    return Status::BadInput(where + ": staged recipe without chunk_k");
  }
  if (r.steps < 1) {
    return Status::BadInput(where + ": recipe has " + std::to_string(r.steps) +
                            " serial row steps (at least 1)");
  }
  if (r.interleaved_steps && g.k == 1) {
    return Status::BadInput(where +
                            ": interleaved row steps need a K split (k > 1)");
  }
  g = passes::MakeGemmGrid(g.M, g.K, g.N, g.m, g.k, g.n, g.first, g.stride,
                           r.staging, r.chunk_k, r.batch_chunks, r.steps,
                           r.interleaved_steps);
  return g;
}

// ---------------------------------------------------------------- GEMM

// One GEMM being lowered: its grid, operands, phases and per-tile state.
struct Lowering::GemmState {
  const fb::OperationT* op = nullptr;
  ReductionChoice choice;
  GemmGrid g;
  std::string where;
  uint32_t a_id = 0, b_id = 0, c_id = 0;
  const fb::ValueT* A = nullptr;
  const fb::ValueT* B = nullptr;
  const fb::ValueT* C = nullptr;
  // The calls write C directly: no K split, and no staged calls that would
  // round an F16 output again.
  bool to_value = false;
  fb::DType partials = fb::DType::F32;  // the partial / accumulator dtype
  // Every step's phases, one step after another: C0 X0 C1 X1 ... X(L-1)
  // CL, then the reduction epochs.
  PhaseList list;
  // The serial row step being lowered, its phases' label suffix, and its
  // phases and tiles.
  int step = 0;
  std::string step_label;
  std::vector<Phase*> cphase, xphase;
  // The left operand's delivery plan (the whole panel; chunks clip it).
  passes::TransferPlan a_plan;
  // A grid tile's storage. The buffers are made by the first step that
  // needs them and reused by the later ones (a later step never has more
  // rows; a buffer grows where K pieces align differently).
  struct Tile {
    bool aliased = false;        // this step
    std::vector<Storage> chunk;  // this step's chunk c -> its buffer and box
    Storage partial;  // this step's accumulator / partials (or C's storage)
    int stage[2] = {-1, -1};
    int partial_buffer = -1;
    int remote = -1, accumulator = -1;
    const Storage* result = nullptr;  // C on this tile, once made
    bool counted = false;             // in the reduction's notes
  };
  std::map<int, Tile> tiles;
};

Status Lowering::LowerGemm(const fb::OperationT& op,
                           const ReductionChoice& choice, OpProgram* out) {
  GemmState s;
  TILEC_RETURN_IF_ERROR(StartGemm(op, choice, &s));
  // One step after another, each tile's buffers reused by every step.
  for (int step = 0; step < s.g.steps; ++step) {
    TILEC_RETURN_IF_ERROR(StartGemmStep(step, &s));
    TILEC_RETURN_IF_ERROR(PlanGemmTiles(&s));
    TILEC_RETURN_IF_ERROR(DeliverLeftOperand(&s));
    if (s.g.k == 1) {
      TILEC_RETURN_IF_ERROR(ConvertAccumulators(&s));
    } else {
      TILEC_RETURN_IF_ERROR(ReducePartials(&s));
    }
  }
  notes_[op.id].steps = s.g.steps;
  notes_[op.id].interleaved_steps = s.g.interleaved;
  out->phases = Normalize(&s.list);
  return Status::Ok();
}

Status Lowering::StartGemm(const fb::OperationT& op,
                           const ReductionChoice& choice, GemmState* s) {
  StatusOr<GemmGrid> grid = ReadGemmGrid(*module_, op);
  if (!grid.ok()) return grid.status();
  s->op = &op;
  s->choice = choice;
  s->g = *grid;
  s->where = OpWhere(op);
  s->a_id = op.operands[0];
  s->b_id = op.operands[1];
  s->c_id = op.results[0];
  s->A = value(s->a_id);
  s->B = value(s->b_id);
  s->C = value(s->c_id);
  if (!s->A->ownership || !s->B->ownership || !s->C->ownership) {
    return Status::BadInput(s->where +
                            ": operands have no ownership (run "
                            "plan-ownership first)");
  }
  if (!passes::SameOwnership(*s->C->ownership, s->g.ResultOwnership())) {
    return Status::BadInput(s->where + ": the result must be owned " +
                            ir::OwnershipText(s->g.ResultOwnership()) +
                            " as the grid reduces it (docs/planning.md), not " +
                            ir::OwnershipText(*s->C->ownership));
  }
  const GemmGrid& g = s->g;
  s->to_value = g.k == 1 && (!g.staged || s->C->dtype == fb::DType::F32);
  s->partials = g.k > 1 ? choice.partials : fb::DType::F32;
  s->a_plan = passes::PlanTransfers(*s->A->ownership, g.ANeeded(), s->A->shape,
                                    ir::DTypeBytes(s->A->dtype));
  return Status::Ok();
}

// Step `step`'s staging and GEMM phases, after the previous step's.
Status Lowering::StartGemmStep(int step, GemmState* s) {
  const GemmGrid& g = s->g;
  s->step = step;
  s->cphase.clear();
  s->xphase.clear();
  for (auto& [t, ts] : s->tiles) {
    ts.aliased = false;
    ts.chunk.clear();
    ts.partial = Storage();
  }
  s->step_label = g.steps > 1 ? " (step " + std::to_string(step) + ")" : "";
  const std::string& suffix = s->step_label;
  int chunks = 1;
  for (int ki = 0; ki < g.k; ++ki) chunks = std::max(chunks, g.Chunks(ki));
  s->cphase.push_back(NewPhase(&s->list, Phase::Kind::kCompute, "stage" + suffix));
  for (int c = 0; c < chunks; ++c) {
    s->xphase.push_back(NewPhase(
        &s->list, Phase::Kind::kExchange,
        (chunks == 1 ? std::string("stage A") : "stage A " + std::to_string(c)) +
            suffix));
    s->cphase.push_back(
        NewPhase(&s->list, Phase::Kind::kCompute, "gemm" + suffix));
  }
  return Status::Ok();
}

// Per tile: where its output goes, how it holds A and the parts of its
// panel it copies (passes/core/tile_plan.h decides, as the planner prices),
// its staging buffers and its GEMM calls, one per K piece of each chunk.
Status Lowering::PlanGemmTiles(GemmState* s) {
  const GemmGrid& g = s->g;
  const uint32_t op_id = s->op->id;
  OpNotes& notes = notes_[op_id];
  std::multimap<int, Box> local_boxes;  // tile -> boxes it copies locally
  for (const passes::LocalCopy& lc : s->a_plan.local_copies) {
    local_boxes.insert({lc.tile, lc.box});
  }
  const int a_eb = ir::DTypeBytes(s->A->dtype);
  StatusOr<kernels::DType> a_kdtype = kernels::DTypeFromFb(s->A->dtype);
  if (!a_kdtype.ok()) return a_kdtype.status();
  const int align = module_->target ? module_->target->alignment : 8;
  passes::GemmTilePlanner planner(g, model_, *a_kdtype, a_eb, align);
  // Calls of tiles that use their left operand in place join the first
  // GEMM phase of the staged tiles (or run alone if none is staged).
  Phase in_place;
  int64_t stage_bytes = 0;
  for (int mi = 0; mi < g.m; ++mi) {
    for (int ki = 0; ki < g.k; ++ki) {
      for (int ni = 0; ni < g.n; ++ni) {
        const int t = g.Tile(mi, ki, ni);
        // A block of fewer rows than steps computes none in later ones.
        if (g.StepRowCount(mi, s->step) == 0) continue;
        GemmState::Tile& ts = s->tiles[t];
        // Tiles are counted once, in the step they first compute.
        const bool first_step = s->step == 0;
        notes.tiles += first_step;
        StatusOr<const Storage*> b_store = Operand(s->b_id, t, op_id);
        if (!b_store.ok()) return b_store.status();
        const Storage& bs = **b_store;
        TILEC_RETURN_IF_ERROR(PlaceGemmOutput(s, mi, ki, ni, &ts.partial));
        const Storage* a_here = nullptr;
        if (!HeldBoxes(*s->A->ownership, s->A->shape, t).empty()) {
          StatusOr<const Storage*> a_store = Operand(s->a_id, t, op_id);
          if (!a_store.ok()) return a_store.status();
          a_here = *a_store;
        }
        std::vector<Box> local;
        auto range = local_boxes.equal_range(t);
        for (auto it = range.first; it != range.second; ++it) {
          local.push_back(it->second);
        }
        passes::GemmTileInput in;
        in.mi = mi;
        in.ni = ni;
        in.ki = ki;
        in.step = s->step;
        in.a_storage = a_here ? &a_here->segments : nullptr;
        in.local = local;
        in.alias_in_place =
            options_.alias_in_place && a_here && CanUseInPlace(*a_here);
        // Several K pieces accumulate: only into F32, never into an output
        // or 16-bit partial that each call would round again.
        in.k_pieces = options_.k_pieces && !s->to_value &&
                      s->partials == fb::DType::F32;
        StatusOr<passes::GemmTilePlan> plan = planner.Plan(in);
        if (!plan.ok()) return plan.status();
        if (plan->aliased) {
          ts.aliased = true;
          notes.aliased_tiles += first_step;
          // In place: the step's rows are one run (tile_plan.h).
          const Box a_box = plan->chunks[0].span;
          Storage view;
          view.buffer = a_here->buffer;
          view.segments = {
              Segment{a_box, *ContiguousOffset(a_box, a_here->segments)}};
          TILEC_RETURN_IF_ERROR(AddGemmCalls(*s, t, ni, bs, view, false, &in_place));
          continue;
        }
        notes.k_pieced_tiles += first_step && plan->k_pieced;
        StatusOr<int64_t> bytes = StageGemmChunks(s, t, mi, *plan);
        if (!bytes.ok()) return bytes.status();
        stage_bytes = std::max(stage_bytes, *bytes);
        notes.staged_tiles += first_step;
        for (size_t c = 0; c < ts.chunk.size(); ++c) {
          TILEC_RETURN_IF_ERROR(
              AddGemmCalls(*s, t, ni, bs, ts.chunk[c], c > 0, s->cphase[c + 1]));
        }
      }
    }
  }
  notes.stage_bytes_per_tile = std::max(notes.stage_bytes_per_tile, stage_bytes);
  Phase* target = notes.staged_tiles > 0 ? s->cphase[1] : s->cphase[0];
  for (VCall& c : in_place.calls) target->calls.push_back(std::move(c));
  return Status::Ok();
}

// Tile t's GEMM calls over a_store into its partial (or C) of this step:
// one per K piece of the operand, [rows, w] x [w, bn], the first
// accumulating only if `accumulate`.
Status Lowering::AddGemmCalls(const GemmState& s, int t, int ni,
                              const Storage& b_store, const Storage& a_store,
                              bool accumulate, Phase* phase) {
  const GemmGrid& g = s.g;
  const Storage& out = s.tiles.at(t).partial;
  const int a_eb = ir::DTypeBytes(s.A->dtype);
  const int b_eb = ir::DTypeBytes(s.B->dtype);
  const int p_eb = ir::DTypeBytes(buffers_[out.buffer].dtype);
  int64_t bm = 0;
  for (const Segment& run : out.segments) bm += BoxRows(run.box);
  const int64_t bn = g.cols.Size(ni);
  // A K piece is the step's row runs stacked: consecutive segments of the
  // same columns (GemmGrid::StepPanelPieces).
  for (size_t i = 0; i < a_store.segments.size();) {
    const Segment& piece = a_store.segments[i];
    const int64_t kc0 = piece.box.begin[1], kc1 = piece.box.end[1];
    const int64_t w = kc1 - kc0;
    for (++i; i < a_store.segments.size() &&
              a_store.segments[i].box.begin[1] == kc0 &&
              a_store.segments[i].box.end[1] == kc1;
         ++i) {
    }
    const std::optional<int64_t> b_off = ContiguousOffset(
        Box2(kc0, kc1, g.cols.Begin(ni), g.cols.End(ni)), b_store.segments);
    if (!b_off) {
      return Status::BadInput(
          s.where + ": right operand %" + std::to_string(s.b_id) +
          " on tile " + std::to_string(t) + " does not hold rows [" +
          std::to_string(kc0) + ", " + std::to_string(kc1) +
          ") of its block contiguously (resident blocks must follow "
          "the grid, docs/planning.md)");
    }
    VCall call;
    call.tile = t;
    call.kernel = kernels::names::kGemm;
    call.args = {{a_store.buffer, piece.offset * a_eb, bm * w * a_eb},
                 {b_store.buffer, *b_off * b_eb, w * bn * b_eb},
                 {out.buffer, out.segments[0].offset * p_eb, bm * bn * p_eb}};
    call.params = {bm, w, bn, accumulate ? 1 : 0};
    call.op = s.op->id;
    AddCall(phase, std::move(call));
    accumulate = true;
  }
  return Status::Ok();
}

// Where tile (mi, ki, ni)'s calls write: C's block itself (to_value), or
// an accumulator / partial buffer of the block in interleaved memory.
Status Lowering::PlaceGemmOutput(GemmState* s, int mi, int ki, int ni,
                                 Storage* out) {
  const GemmGrid& g = s->g;
  const int t = g.Tile(mi, ki, ni);
  GemmState::Tile& ts = s->tiles[t];
  // The step's rows stacked run after run (one run without a K split).
  const passes::Segments panel =
      g.StepPanel(mi, s->step, g.cols.Begin(ni), g.cols.End(ni));
  if (s->to_value) {
    const Box block = g.CBox(mi, ni);
    const Box rows = panel.front().box;
    if (ts.result == nullptr) {
      ts.result = NewValueStorage(s->c_id, t, s->op->id, BufferKind::kValue,
                                  nullptr, /*interleaved=*/true);
    }
    const Storage& cs = *ts.result;
    if (cs.segments.size() != 1 || !(cs.segments[0].box == block)) {
      return Status::Internal(s->where + ": tile " + std::to_string(t) +
                              " does not hold its block of the result");
    }
    out->buffer = cs.buffer;
    out->segments = {Segment{
        rows, cs.segments[0].offset +
                  (rows.begin[0] - block.begin[0]) * BoxWidth(block)}};
    return Status::Ok();
  }
  // The first step has the most rows.
  if (ts.partial_buffer < 0) {
    ts.partial_buffer =
        NewBuffer(t, Extent(panel), s->partials, 0, -1, s->op->id,
                  BufferKind::kPartial,
                  s->op->name + (g.k > 1 ? ".partials" : ".accumulator"),
                  /*interleaved=*/true);
  }
  out->segments = panel;
  out->buffer = ts.partial_buffer;
  return Status::Ok();
}

// A staged tile's chunks of K, each one panel or cut into K pieces (the
// plan), in two alternating buffers. Returns the tile's staging bytes.
StatusOr<int64_t> Lowering::StageGemmChunks(GemmState* s, int t, int mi,
                                            const passes::GemmTilePlan& plan) {
  const GemmGrid& g = s->g;
  const int a_eb = ir::DTypeBytes(s->A->dtype);
  const int align = module_->target ? module_->target->alignment : 8;
  const int chunks = static_cast<int>(plan.chunks.size());
  std::vector<Segments> segments(chunks);
  int64_t extent[2] = {0, 0};
  for (int c = 0; c < chunks; ++c) {
    segments[c] =
        g.StepPanelPieces(mi, s->step, plan.chunks[c].cuts, a_eb, align);
    extent[c % 2] = std::max(extent[c % 2], Extent(segments[c]));
  }
  const int nbuf = std::min(chunks, 2);
  GemmState::Tile& ts = s->tiles[t];
  int64_t bytes = 0;
  for (int i = 0; i < nbuf; ++i) {
    int& buf = ts.stage[i];
    if (buf < 0) {
      buf = NewBuffer(t, extent[i], s->A->dtype, s->A->fp8_scale_exp, -1,
                      s->op->id, BufferKind::kStage,
                      s->op->name + ".stage" + (nbuf > 1 ? std::to_string(i) : ""),
                      false);
    }
    VBuffer& b = buffers_[buf];
    b.bytes = std::max(b.bytes, extent[i] * ir::DTypeBytes(s->A->dtype));
    bytes += b.bytes;
  }
  for (int c = 0; c < chunks; ++c) {
    Storage chunk;
    chunk.buffer = ts.stage[c % 2];
    chunk.segments = segments[c];
    ts.chunk.push_back(chunk);
  }
  return bytes;
}

// The left operand's transfers and local copies, clipped to each chunk.
Status Lowering::DeliverLeftOperand(GemmState* s) {
  OpNotes& notes = notes_[s->op->id];
  if (notes.staged_tiles > 0) {
    auto deliver = [&](const Box& box, int src, int dst) -> Status {
      auto it = s->tiles.find(dst);
      if (it == s->tiles.end() || it->second.aliased) return Status::Ok();
      StatusOr<const Storage*> from = Operand(s->a_id, src, s->op->id);
      if (!from.ok()) return from.status();
      const std::vector<Storage>& chunk = it->second.chunk;
      for (size_t c = 0; c < chunk.size(); ++c) {
        for (const Box& span : RowRunSpans(chunk[c].segments)) {
          const Box part = IntersectBoxes(box, span);
          if (part.Empty()) continue;
          TILEC_RETURN_IF_ERROR(Move(part, src, **from, dst, chunk[c],
                                     s->A->dtype, s->op->id, s->cphase[c],
                                     s->xphase[c]));
        }
      }
      return Status::Ok();
    };
    for (const passes::Transfer& tr : s->a_plan.transfers) {
      for (int dst : tr.destination_tiles) {
        TILEC_RETURN_IF_ERROR(deliver(tr.box, tr.source_tile, dst));
      }
    }
    for (const passes::LocalCopy& lc : s->a_plan.local_copies) {
      TILEC_RETURN_IF_ERROR(deliver(lc.box, lc.tile, lc.tile));
    }
  }
  for (const Phase* x : s->xphase) notes.stage_phases += !x->transfers.empty();
  return Status::Ok();
}

// k = 1 with staged calls: each tile's F32 accumulator into C, with the
// cheaper of a cast and a one-partial reduction.
Status Lowering::ConvertAccumulators(GemmState* s) {
  if (s->to_value) return Status::Ok();
  const int c_eb = ir::DTypeBytes(s->C->dtype);
  Phase* last = s->cphase.back();
  for (auto& [t, ts] : s->tiles) {
    if (ts.partial.segments.empty()) continue;  // no rows in this step
    const Box cbox = ts.partial.segments[0].box;
    if (ts.result == nullptr) {
      ts.result = NewValueStorage(s->c_id, t, s->op->id, BufferKind::kValue,
                                  nullptr, false);
    }
    const Storage& cs = *ts.result;
    const int64_t n = cbox.Elements();
    const int64_t at = *ContiguousOffset(cbox, cs.segments);
    VCall cast;
    cast.tile = t;
    cast.kernel = kernels::names::kCast;
    cast.args = {{ts.partial.buffer, 0, n * 4},
                 {cs.buffer, at * c_eb, n * c_eb}};
    cast.params = {BoxRows(cbox), BoxWidth(cbox)};
    cast.op = s->op->id;
    VCall reduce = cast;
    reduce.kernel = kernels::names::kReducePartials;
    reduce.params = {n};
    StatusOr<int64_t> cc = CallCycles(model_, buffers_, cast);
    StatusOr<int64_t> rc = CallCycles(model_, buffers_, reduce);
    if (!cc.ok()) return cc.status();
    if (!rc.ok()) return rc.status();
    const bool use_reduce = *rc < *cc;
    notes_[s->op->id].converter = std::string(
        use_reduce ? kernels::names::kReducePartials : kernels::names::kCast);
    AddCall(last, use_reduce ? std::move(reduce) : std::move(cast));
  }
  return Status::Ok();
}

// k > 1: tile (mi, ki, ni) reduces its share of block (mi, ni)'s rows: its
// own partial's rows in place (the seed), the same rows of the k - 1 other
// partials received one contiguous piece each, at most
// choice.partials_per_epoch of them per exchange phase, summed in ki order
// straight into C.
Status Lowering::ReducePartials(GemmState* s) {
  const GemmGrid& g = s->g;
  OpNotes& notes = notes_[s->op->id];
  const int per_epoch =
      s->choice.partials_per_epoch > 0 ? s->choice.partials_per_epoch : g.k;
  int epochs = 1;
  for (int ki = 0; ki < g.k; ++ki) {
    epochs = std::max<int>(epochs, EpochGroups(g.k, per_epoch, ki).size());
  }
  notes.reduce_epochs = epochs;
  notes.partials = ir::DTypeText(s->partials);
  std::vector<Phase*> rx, rc;
  for (int e = 0; e < epochs; ++e) {
    rx.push_back(NewPhase(&s->list, Phase::Kind::kExchange,
                          (epochs == 1 ? std::string("partials")
                                       : "partials " + std::to_string(e)) +
                              s->step_label));
    rc.push_back(
        NewPhase(&s->list, Phase::Kind::kCompute, "reduce" + s->step_label));
  }
  for (int mi = 0; mi < g.m; ++mi) {
    for (int ki = 0; ki < g.k; ++ki) {
      for (int ni = 0; ni < g.n; ++ni) {
        TILEC_RETURN_IF_ERROR(ReduceTileRows(
            s, mi, ki, ni, EpochGroups(g.k, per_epoch, ki), rx, rc));
      }
    }
  }
  return Status::Ok();
}

// Tile (mi, ki, ni)'s rows of this step: the other partials' pieces into its
// remote buffer, epoch by epoch, and one reduce_partials call per epoch.
Status Lowering::ReduceTileRows(GemmState* s, int mi, int ki, int ni,
                                const std::vector<std::vector<int>>& groups,
                                const std::vector<Phase*>& rx,
                                const std::vector<Phase*>& rc) {
  const GemmGrid& g = s->g;
  const uint32_t op_id = s->op->id;
  const int R = g.Tile(mi, ki, ni);
  const Box rows = g.StepResultBox(mi, ki, ni, s->step);
  if (rows.Empty()) return Status::Ok();
  GemmState::Tile& ts = s->tiles[R];
  OpNotes& notes = notes_[op_id];
  if (!ts.counted) {
    ts.counted = true;
    ++notes.ranges;
    ++notes.seeds_in_place;
    ++notes.direct_writes;
  }
  const int pb = ir::DTypeBytes(s->partials);
  const int c_eb = ir::DTypeBytes(s->C->dtype);
  const int64_t n = rows.Elements();
  const int64_t seed_offset =
      g.PanelRow(mi, s->step, rows.begin[0]) * BoxWidth(rows);
  if (ts.result == nullptr) {
    ts.result = NewValueStorage(s->c_id, R, op_id, BufferKind::kValue,
                                nullptr, false);
  }
  const int64_t at = *ContiguousOffset(rows, ts.result->segments);
  const VSlice seed = {ts.partial.buffer, seed_offset * pb, n * pb};
  const VSlice result = {ts.result->buffer, at * c_eb, n * c_eb};
  // The reduction buffers hold the step with the most rows here.
  const int64_t most = g.MostStepResultRows(mi, ki) * BoxWidth(rows);
  int slots = 0;
  for (const auto& group : groups) {
    slots = std::max<int>(
        slots, group.size() - std::count(group.begin(), group.end(), ki));
  }
  if (ts.remote < 0) {
    ts.remote = NewBuffer(R, int64_t{slots} * most, s->partials, 0, -1, op_id,
                          BufferKind::kRemote, s->op->name + ".remote", false);
  }
  VSlice accumulator;
  if (groups.size() > 1) {
    if (ts.accumulator < 0) {
      ts.accumulator = NewBuffer(R, most, fb::DType::F32, 0, -1, op_id,
                                 BufferKind::kResult,
                                 s->op->name + ".accumulator", false);
    }
    accumulator = {ts.accumulator, 0, n * 4};
  }
  for (size_t e = 0; e < groups.size(); ++e) {
    VCall call;
    call.tile = R;
    call.kernel = kernels::names::kReducePartials;
    call.op = op_id;
    call.params = {n};
    if (e > 0) call.args.push_back(accumulator);
    int slot = 0;
    for (int kj : groups[e]) {
      if (kj == ki) {
        call.args.push_back(seed);
        continue;
      }
      Storage dst;
      dst.buffer = ts.remote;
      dst.segments = {Segment{rows, int64_t{slot} * n}};
      const int T = g.Tile(mi, kj, ni);
      TILEC_RETURN_IF_ERROR(Move(rows, T, s->tiles[T].partial, R, dst,
                                 s->partials, op_id, rc[e], rx[e]));
      call.args.push_back({ts.remote, int64_t{slot} * n * pb, n * pb});
      ++slot;
    }
    call.args.push_back(e + 1 == groups.size() ? result : accumulator);
    AddCall(rc[e], std::move(call));
  }
  return Status::Ok();
}

}  // namespace tilec::lower
