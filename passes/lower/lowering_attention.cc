// Lowering of attention (AttentionScores, AttentionContext) as
// passes/core/attention_plan.h decides it.

#include "passes/lower/lowering.h"

#include "formats/print.h"
#include "kernels/kernel_names.h"
#include "kernels/kernels.h"
#include "passes/core/attention_plan.h"
#include "passes/core/ownership.h"
#include "passes/lower/lowering_internal.h"

namespace tilec::lower {

// passes/core/attention_plan.h decides; this builds it: per tile staging
// buffers for its q/k (scores) or v (context) block, filled by local
// copies and one exchange phase, then one kernel call writing the tile's
// block of the result.
Status Lowering::LowerAttention(const fb::OperationT& op, OpProgram* out) {
  const bool scores = op.kind == fb::OpKind::AttentionScores;
  const std::string where = OpWhere(op);
  // Cross-attention scores read q (operand 0, in place) and stage kv.
  const bool cross_scores = scores && op.operands.size() == 2;
  if ((!scores && op.operands.size() != 2) ||
      (scores && op.operands.size() != 1 && !cross_scores) ||
      op.results.size() != 1) {
    return Status::BadInput(where + ": wrong operand count for " +
                            ir::OpKindText(op.kind));
  }
  const uint32_t qkv_id = op.operands[scores && !cross_scores ? 0 : 1];
  const uint32_t y_id = op.results[0];
  const fb::ValueT* QKV = value(qkv_id);
  const fb::ValueT* Y = value(y_id);
  const fb::ValueT* P = scores ? nullptr : value(op.operands[0]);
  if (!QKV || !Y || (!scores && !P)) {
    return Status::BadInput(where + ": reads an undefined value");
  }
  if (!op.recipe || op.recipe->kind != fb::RecipeKind::Attention) {
    return Status::BadInput(where + ": needs an attention recipe (run "
                            "plan-ownership first)");
  }
  if (!QKV->ownership) {
    return Status::BadInput(where + ": qkv %" + std::to_string(qkv_id) +
                            " has no ownership");
  }
  const fb::RecipeT& r = *op.recipe;
  StatusOr<passes::AttentionGrid> grid = passes::MakeAttentionGrid(
      scores ? passes::AttentionPart::kScores
             : passes::AttentionPart::kContext,
      QKV->shape, scores ? Y->shape : P->shape, op.heads, op.head_dim,
      r.m_split, r.n_split, r.layout ? r.layout->first_tile : 0,
      op.first_image);
  if (!grid.ok()) return Status::BadInput(where + ": " + grid.status().message());
  const passes::AttentionGrid& g = *grid;
  if (g.first + g.Tiles() > tiles_) {
    return Status::BadInput(where + ": its grid needs tiles up to " +
                            std::to_string(g.first + g.Tiles() - 1) +
                            " of " + std::to_string(tiles_));
  }
  if (!passes::SameOwnership(*Y->ownership, g.ResultOwnership())) {
    return Status::BadInput(
        where + ": result owned " + ir::OwnershipText(*Y->ownership) +
        " but the recipe writes " + ir::OwnershipText(g.ResultOwnership()));
  }
  PhaseList list;
  Phase* copies = NewPhase(&list, Phase::Kind::kCompute, "stage qkv");
  Phase* exchange = NewPhase(&list, Phase::Kind::kExchange, "deliver qkv");
  Phase* calls = NewPhase(
      &list, Phase::Kind::kCompute,
      std::string(scores ? kernels::names::kGemmNt : kernels::names::kGemm));
  // Staging: one buffer per staged box of each tile.
  static constexpr const char* kViewNames[] = {".q", ".k", ".v"};
  const std::vector<int> views = g.StagedViews();
  std::map<int, std::vector<Storage>> staged;
  g.ForEachTile([&](int64_t b, int64_t h, int mi, int ni, int t) {
    const std::vector<Box> boxes = g.StagedBoxes(b, h, mi, ni);
    for (size_t i = 0; i < boxes.size(); ++i) {
      Storage st;
      st.segments = {Segment{boxes[i], 0}};
      st.buffer = NewBuffer(t, boxes[i].Elements(), QKV->dtype,
                            QKV->fp8_scale_exp, -1, op.id, BufferKind::kStage,
                            op.name + kViewNames[views[i]] + ".stage", false);
      staged[t].push_back(st);
    }
  });
  OpNotes& notes = notes_[op.id];
  notes.staged_tiles = static_cast<int>(staged.size());
  auto deliver = [&](const Box& box, int src, int dst) -> Status {
    StatusOr<const Storage*> from = Operand(qkv_id, src, op.id);
    if (!from.ok()) return from.status();
    for (const Storage& st : staged[dst]) {
      if (IntersectBoxes(st.segments[0].box, box).Empty()) continue;
      return Move(box, src, **from, dst, st, QKV->dtype, op.id, copies,
                  exchange);
    }
    return Status::Internal(where + ": tile " + std::to_string(dst) +
                            " stages no box around " + passes::FormatBox(box));
  };
  const passes::TransferPlan plan = passes::AttentionDelivery(
      g, *QKV->ownership, QKV->shape, ir::DTypeBytes(QKV->dtype));
  for (const passes::Transfer& tr : plan.transfers) {
    for (int dst : tr.destination_tiles) {
      TILEC_RETURN_IF_ERROR(deliver(tr.box, tr.source_tile, dst));
    }
  }
  for (const passes::LocalCopy& lc : plan.local_copies) {
    TILEC_RETURN_IF_ERROR(deliver(lc.box, lc.tile, lc.tile));
  }
  notes.stage_phases = plan.transfers.empty() ? 0 : 1;
  Status status;
  g.ForEachTile([&](int64_t b, int64_t h, int mi, int ni, int t) {
    if (!status.ok()) return;
    status = AttentionCall(op, g, b, h, mi, ni, t, staged[t], calls);
  });
  TILEC_RETURN_IF_ERROR(status);
  notes.tiles = static_cast<int>(g.Tiles());
  out->phases = Normalize(&list);
  return Status::Ok();
}

// Tile t's kernel call: scores = scale * q k^T (gemm_nt) or context = P v
// (gemm), written straight into its block of the result. Cross-attention's
// queries are read where the planner put them (QueryNeeded), like the
// context's probabilities.
Status Lowering::AttentionCall(const fb::OperationT& op,
                               const passes::AttentionGrid& g, int64_t b,
                               int64_t h, int mi, int ni, int t,
                               const std::vector<Storage>& staged,
                               Phase* calls) {
  const bool scores = op.kind == fb::OpKind::AttentionScores;
  const uint32_t y_id = op.results[0];
  const fb::ValueT* Y = value(y_id);
  Storage* ys = NewValueStorage(y_id, t, op.id, BufferKind::kValue, nullptr,
                                /*interleaved=*/true);
  const Box block = g.ResultBox(b, h, mi, ni);
  if (ys->segments.size() != 1 || !(ys->segments[0].box == block)) {
    return Status::Internal(OpWhere(op) + ": tile " + std::to_string(t) +
                            " does not hold its block of the result");
  }
  const int64_t rows = g.rows.Size(mi), cols = g.cols.Size(ni);
  const int64_t inner = g.Inner();
  const int y_eb = ir::DTypeBytes(Y->dtype);
  const int s_eb = ir::DTypeBytes(buffers_[staged[0].buffer].dtype);
  auto whole = [&](const Storage& st) {
    return VSlice{st.buffer, 0, st.segments[0].box.Elements() * s_eb};
  };
  VCall call;
  call.tile = t;
  call.op = op.id;
  call.params = {rows, inner, cols, 0};
  const VSlice result{ys->buffer, 0, rows * cols * y_eb};
  if (scores) {
    call.kernel = kernels::names::kGemmNt;
    if (g.cross) {
      StatusOr<VSlice> q = Contiguous(op.operands[0], t, g.QueryBox(b, h, mi),
                                      op, "queries", calls);
      if (!q.ok()) return q.status();
      call.args = {*q, whole(staged[0]), result};
    } else {
      call.args = {whole(staged[0]), whole(staged[1]), result};
    }
    call.fparams = {op.scale};
  } else {
    StatusOr<VSlice> probs = Contiguous(op.operands[0], t, g.ProbsBox(b, h, mi),
                                        op, "probabilities", calls);
    if (!probs.ok()) return probs.status();
    call.kernel = kernels::names::kGemm;
    call.args = {*probs, whole(staged[0]), result};
  }
  AddCall(calls, std::move(call));
  return Status::Ok();
}

}  // namespace tilec::lower
